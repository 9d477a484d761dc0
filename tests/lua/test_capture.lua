-- Unit tests of haproxy/capture.lua under a stock Lua (5.3 and 5.4, tests/test_lua.py
-- runs both) with the stand-in for HAProxy's API (tests/lua/haproxy.lua): the request
-- scanner of cut bodies (judged members, costly tools, allow-list, tiers, stateful
-- members, the stream_options amendment) and the removal of the usage event from an
-- amended stream, each at every split point of its body.
-- Run from the repository root: lua5.4 tests/lua/test_capture.lua [name...]
package.path = "tests/lua/?.lua;" .. package.path
local H = require("haproxy")
local U = require("unit")
local Capture = H.load_capture("haproxy")

-- decision.c's DECISION_AMEND_TAIL.
local AMEND = ',"stream_options":{"include_usage":true}'

local test, eq, every_split = U.test, U.eq, U.every_split

local function vars(extra)
    local v = { ["txn.tally.amend_scan"] = 1 }
    for k, x in pairs(extra or {}) do
        v[k] = x
    end
    return v
end

-- A body nothing may change but the amendment: out is body with text put before its
-- closing brace, or as many spaces.
local function passes(body, txnvars, text)
    return every_split(Capture, body, txnvars, function(out)
        local at = body:match(".*()}")
        eq(out, body:sub(1, at - 1) .. text .. body:sub(at), "passed body")
    end)
end

-- A body that must not reach the upstream as valid JSON: a NUL in it, its length the
-- one announced (the body's own plus the amendment's).
local function spoiled(body, txnvars)
    local grow = #((txnvars or {})["txn.tally.amend_text"] or "")
    return every_split(Capture, body, txnvars, function(out)
        eq(#out, #body + grow, "length")
        if not out:find("%z") then
            error("not spoiled: " .. out, 0)
        end
    end)
end

local AM = { ["txn.tally.amend_text"] = AMEND }

test("stream without stream_options gets the amendment before its closing brace", function()
    passes('{"model":"m","stream":true,"messages":[{"role":"user","content":"}{\\"x"}]}',
        vars(AM), AMEND)
end)

test("a body that is no stream gets spaces of the amendment's length", function()
    passes('{"model":"m","stream":false,"messages":[]}', vars(AM), string.rep(" ", #AMEND))
    passes('{"model":"m","messages":[]}', vars(AM), string.rep(" ", #AMEND))
end)

test("a stream that asked for usage keeps its stream_options, padded", function()
    passes('{"stream":true,"stream_options":{"include_usage":true},"model":"m"}', vars(AM),
        string.rep(" ", #AMEND))
end)

test("stream_options that does not ask is rewritten in place, the length kept", function()
    for _, opts in ipairs({ '{"include_usage":false}', '{ }', 'null',
                            '{"include_usage":true,"include_usage":false}',
                            '{"Include_usage":true}' }) do
        local body = '{"stream":true,"stream_options":' .. opts .. ',"model":"m"}'
        every_split(Capture, body, vars(AM), function(out)
            eq(#out, #body + #AMEND, "length")
            local head = '{"stream":true,"stream_options":{"include_usage":true},"model":"m"'
            eq(out:sub(1, #head), head, "rewritten " .. opts)
            if not out:sub(#head + 1):match("^ *}$") then
                error("tail " .. out, 0)
            end
        end)
    end
end)

test("stream_options before stream: rewritten, or refused when null and a stream", function()
    for _, opts in ipairs({ '[]', '{"include_usage":false}', 'true', '"x"' }) do
        local body = '{"stream_options":' .. opts .. ',"model":"m","stream":true}'
        local head = '{"stream_options":{"include_usage":true},"model":"m","stream":true'
        every_split(Capture, body, vars(AM), function(out)
            eq(out, head .. string.rep(" ", #body + #AMEND - #head - 1) .. "}", "rewritten " .. opts)
        end)
    end
    -- null may stand in a body that is no stream: it cannot be rewritten before "stream"
    -- is known, and a second stream_options would make two.
    spoiled('{"stream_options":null,"model":"m","stream":true}', vars(AM))
    passes('{"stream_options":null,"model":"m","stream":false}', vars(AM), string.rep(" ", #AMEND))
    passes('{"stream_options":null,"model":"m"}', vars(AM), string.rep(" ", #AMEND))
end)

test("no scan asked: the filter does not see the request", function()
    local body = '{"model":"a","model":"b"}'
    eq(H.feed(Capture, H.txn({}), body, { splits = { 3 } }), body, "untouched")
end)

test("whole body: the agent's edit at its offset", function()
    local body = '{"stream":true,"stream_options":{"include_usage":false},"model":"m"}'
    local at = body:find("false", 1, true) - 1
    -- The agent edits only a body HAProxy held whole: the first read reaches the edit.
    for k = at + 5, #body do
        local txn = H.txn({ ["txn.tally.amend_text"] = "true", ["txn.tally.amend"] = at,
                            ["txn.tally.amend_cut"] = 5 })
        eq(H.feed(Capture, txn, body, { splits = { k } }), (body:gsub("false", "true")),
            "edited, split " .. k)
    end
end)

test("a judged member twice spoils the body", function()
    spoiled('{"model":"a","messages":[],"model":"b"}', vars())
    spoiled('{"stream":false,"stream":true}', vars(AM))
    spoiled('{"stream_options":null,"stream_options":{"include_usage":false}}', vars(AM))
    spoiled('{"service_tier":"flex","service_tier":"priority"}', vars())
end)

test("a judged member only some readers take spoils the body", function()
    spoiled('{"Model":"b"}', vars())
    spoiled('{"STREAM":true}', vars(AM))
    -- U+017F (long s) and U+212A (Kelvin sign) fold to s and k in Go's reader.
    spoiled('{"\197\191tream":true}', vars(AM))
    spoiled('{"\226\132\170ey":1,"model":"a","\197\191ervice_tier":"flex"}', vars())
    spoiled('{"mod\\u0065l":"b"}', vars())
    spoiled('{"x\\u0000":1}', vars())
end)

test("members nested or in strings are not judged", function()
    local body = '{"model":"a","metadata":{"model":"b","stream":true},' ..
                 '"messages":[{"content":"\\"model\\":\\"c\\""}],"x":["model","model"]}'
    passes(body, vars(), "")
    -- Keys that only resemble judged ones.
    passes('{"models":1,"model_":2,"modeL_x":3,"streaming":true}', vars(), "")
end)

test("allow-list: a model past the cut must be one the key may use, spelled plainly", function()
    local allow = vars({ ["txn.tally.allow"] = "gpt-a\ngpt-b" })
    passes('{"messages":[],"model":"gpt-b"}', allow, "")
    passes('{"model" :  "gpt-a" }', allow, "")
    spoiled('{"messages":[],"model":"gpt-c"}', allow)
    spoiled('{"model":"gpt-\\u0061"}', allow)
    spoiled('{"model":["gpt-a"]}', allow)
    -- No model at all: the upstream would pick one.
    spoiled('{"messages":[]}', allow)
end)

test("costly tools: a type the key may not use spoils, the client's own pass", function()
    local no_o = vars({ ["txn.tally.costly"] = "o" })
    local no_ow = vars({ ["txn.tally.costly"] = "ow" })
    local mine = '{"tools":[{"type":"function","function":{"name":"f","type":"x"}},' ..
                 '{"name":"t","input_schema":{"type":"object"}},{"type":"bash_20250124"},' ..
                 '{"type":"custom"},{"type":"text_editor_20250429"}],"model":"m"}'
    passes(mine, no_ow, "")
    spoiled('{"tools":[{"type":"file_search"}]}', no_o)
    spoiled('{"tools":[{"name":"w","type":"mcp"}]}', no_o)
    -- A web search when the key may run other tools but no web search, and the reverse.
    spoiled('{"tools":[{"type":"web_search_20250305"}]}', vars({ ["txn.tally.costly"] = "w" }))
    passes('{"tools":[{"type":"web_search_preview"}]}', no_o, "")
    -- Forms nobody can judge.
    spoiled('{"tools":["x"]}', no_o)
    -- A value that is no list (reqbody.c: a misshapen member, OTHER); null and [] pass.
    spoiled('{"tools":"web_search"}', no_o)
    spoiled('{"tools": 5,"model":"m"}', no_o)
    spoiled('{"tools":\n {"type":"function"}}', no_o)
    passes('{"tools":null,"model":"m"}', no_o, "")
    passes('{"tools": [],"model":"m"}', no_o, "")
    spoiled('{"tools":[{"type":["file_search"]}]}', no_o)
    spoiled('{"tools":[{"type":"fil\\u0065_search"}]}', no_o)
    spoiled('{"tools":[{"Type":"mcp","type":"function"}]}', no_o)
    spoiled('{"tools":[{"ty\\u0070e":"mcp"}]}', no_o)
    spoiled('{"tools":[{"type":"' .. string.rep("x", 100) .. '"}]}', no_o)
    -- "tools" twice or in a variant spelling, whatever its elements (reqbody.c: OTHER).
    spoiled('{"tools":[{"type":"function"}],"tools":[]}', no_o)
    spoiled('{"tool\197\191":[{"type":"custom"}]}', no_o)
    spoiled('{"Tools":[]}', no_o)
    -- A key that may use them all: tools are not read.
    passes('{"tools":[{"type":"file_search"}]}', vars(), "")
end)

test("costly members: web_search_options, mcp_servers, audio, modalities", function()
    local no_oa = vars({ ["txn.tally.costly"] = "oa" })
    passes('{"web_search_options":null,"audio":null,"modalities":["text"],"mcp_servers":null}',
        no_oa, "")
    spoiled('{"web_search_options":{}}', no_oa)
    spoiled('{"mcp_servers":[{"url":"x"}]}', no_oa)
    spoiled('{"audio":{"voice":"alloy"}}', no_oa)
    spoiled('{"modalities":["text","audio"]}', no_oa)
    spoiled('{"modalities":["text","au\\u0064io"]}', no_oa)
    spoiled('{"Audio":null}', no_oa)
    spoiled('{"audio":null,"audio":{}}', no_oa)
    -- Granted: not judged.
    passes('{"audio":{"voice":"alloy"},"modalities":["audio"]}', vars({ ["txn.tally.costly"] = "o" }), "")
end)

test("tiers: only a tier the key may ask for and the model prices", function()
    local tiers = vars({ ["txn.tally.tiers"] = "default\nflex" })
    passes('{"service_tier":"flex"}', tiers, "")
    passes('{"service_tier":null}', tiers, "")
    spoiled('{"service_tier":"priority"}', tiers)
    spoiled('{"service_tier":"fl\\u0065x"}', tiers)
    spoiled('{"service_tier":1}', tiers)
    passes('{"service_tier":"priority"}', vars(), "")
end)

test("stateful members spoil a cut Responses body, however spelled", function()
    local nostate = vars({ ["txn.tally.nostate"] = 1 })
    for _, key in ipairs({ "previous_response_id", "conversation", "background", "request_id",
                           "Previous_Response_Id", "con\\u0076ersation",
                           string.rep("k", 120) }) do
        spoiled('{"input":"x","' .. key .. '":"resp_1"}', nostate)
    end
    passes('{"input":"x","store":false}', nostate, "")
    passes('{"input":"x","previous_response_id":"resp_1"}', vars(), "")
end)

test("a judged value too long for a plain one spoils at its first byte", function()
    local body = '{"stream":true,"stream_options":{"x":"' .. string.rep("a", 300) .. '"}}'
    local out = spoiled(body, vars(AM))
    eq(out:find("%z"), #'{"stream":true,"stream_options":' + 1, "spoiled at")
end)

test("a judged value longer than the buffer does not stall the body", function()
    local body = '{"stream":true,"stream_options":{"x":"' .. string.rep("a", 40000) .. '"}}'
    local out = H.feed(Capture, H.txn(vars(AM)), body, { splits = { 100 }, bufsize = 16384 })
    eq(#out, #body + #AMEND, "length")
    eq(out:find("%z"), #'{"stream":true,"stream_options":' + 1, "spoiled at")
    -- White space before the value as long as the buffer: it need not wait either.
    body = '{"stream":true,"model":' .. string.rep(" ", 40000) .. '"m"}'
    out = H.feed(Capture, H.txn(vars(AM)), body, { splits = { 100 }, bufsize = 16384 })
    eq(out, body:sub(1, -2) .. AMEND .. "}", "passed")
    body = '{"stream":true,"stream_options":' .. string.rep(" ", 40000) .. 'null}'
    out = H.feed(Capture, H.txn(vars(AM)), body, { splits = { 100 }, bufsize = 16384 })
    eq(#out, #body + #AMEND, "length")
    if not out:match('^{"stream":true,"stream_options": +{"include_usage":true} +}$') then
        error("not rewritten: " .. out:sub(-80), 0)
    end
end)

test("no room for the amendment: what precedes the brace goes first", function()
    local body = '{"stream":true,"messages":"' .. string.rep("m", 90) .. '"}'
    -- The whole body fills the buffer: the insert fails once, then succeeds.
    local out = H.feed(Capture, H.txn(vars(AM)), body, { bufsize = #body })
    eq(out, body:sub(1, -2) .. AMEND .. "}", "amended")
end)

test("a body that never closes keeps its announced length", function()
    local body = '{"model":"m","stream":true,"x":['
    every_split(Capture, body, vars(AM), function(out)
        eq(out, body .. string.rep(" ", #AMEND), "padded")
    end)
    -- Its end fills the buffer: the spaces follow once there is room.
    body = body .. string.rep('"y",', 20)
    local out = H.feed(Capture, H.txn(vars(AM)), body, { bufsize = #body })
    eq(out, body .. string.rep(" ", #AMEND), "padded in a full buffer")
end)

-- The answer side: an amended stream loses the usage event the gateway asked for.
local SSE = 'data: {"id":"c","choices":[{"delta":{"content":"hi \\"usage\\":{"}}],"usage":null}\n\n' ..
            'data: {"id":"c","choices":[{"delta":{},"finish_reason":"stop"}],"usage":null}\n\n'
local USAGE = 'data: {"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
local DONE = 'data: [DONE]\n\n'

-- The answer to a stream request, through the filter instance that scanned the request.
local function response(body, reqvars, ctype, splits, reqbody)
    local txn = H.txn(reqvars, { ["content-type"] = ctype or "text/event-stream" })
    local _, flt = H.feed(Capture, txn, reqbody or '{"model":"m","stream":true}')
    local out = H.feed(Capture, txn, body, { filter = flt, resp = true, splits = splits })
    return out, txn
end

test("an amended stream loses its usage event at every split point", function()
    for _, eol in ipairs({ "\n", "\r\n" }) do
        local function crlf(s)
            return eol == "\n" and s or (s:gsub("\n", "\r\n"))
        end
        local body = crlf(SSE .. USAGE .. DONE)
        local want = crlf(SSE .. DONE)
        for k = 0, #body - 1 do
            local out, txn = response(body, vars(AM), nil, { k })
            eq(out, want, "split " .. k)
            -- The capture still saw the usage.
            if not txn.vars["txn.tally.cap"]:find('"prompt_tokens":3', 1, true) then
                error("capture lost the usage", 0)
            end
        end
    end
end)

test("the usage event last, without its blank line, is removed too", function()
    local out = response(SSE .. USAGE:sub(1, -3), vars(AM))
    eq(out, SSE, "stripped")
end)

test("a stream whose client asked for usage keeps it", function()
    local body = SSE .. USAGE .. DONE
    eq(response(body, vars(AM), nil, { 9 }, '{"stream":true,"stream_options":{"include_usage":true}}'),
        body, "kept")
end)

test("an answer that is no event stream goes whole, usage and all", function()
    local body = '{"error":{"message":"x"},"usage":{"prompt_tokens":1}}'
    eq(response(body, vars(AM), "application/json", { 5, 20 }), body, "error passed")
end)

test("a stream not amended is not touched", function()
    local body = SSE .. USAGE .. DONE
    eq(response(body, { ["txn.tally.amend_scan"] = 1 }, nil, { 7 }), body, "untouched")
end)

test("the capture record names kind, size and the members read by structure", function()
    local body = '{"model":"m","x":{"usage":{"prompt_tokens":9}},"usage":{"prompt_tokens":1}}'
    for k = 1, #body - 1 do
        local txn = H.txn({})
        H.feed(Capture, txn, body, { resp = true, splits = { k } })
        eq(txn.vars["txn.tally.cap"], "c2 j " .. #body ..
            ' {"a":{"model":"m","usage":{"prompt_tokens":1}},"ws":0}', "cap at split " .. k)
    end
end)

test("echoed client content around the usage is read as what it is", function()
    -- The Responses API's order: the client's tools and metadata around the usage.
    local body = '{"id":"resp_1","instructions":"\\"usage\\":{}","model":"gpt-5",' ..
                 '"tools":[{"parameters":{"usage":{"input_tokens":1},"model":"cheap"}}],' ..
                 '"usage" :\n {"input_tokens":50000,"output_tokens":20000},' ..
                 '"metadata":{"model":"cheap","usage":"{}"}}'
    local txn = H.txn({})
    H.feed(Capture, txn, body, { resp = true, splits = { 100, 200 } })
    eq(txn.vars["txn.tally.cap"], "c2 j " .. #body .. ' {"a":{"id":"resp_1","model":"gpt-5",' ..
        '"usage":{"input_tokens":50000,"output_tokens":20000}},"ws":0}', "cap")
end)

test("a stream keeps its first event and its first and last usage events", function()
    local body = 'event: message_start\ndata: {"type": "message_start", "message": ' ..
                 '{"model": "c", "usage": {"input_tokens": 10}}}\n\n' ..
                 'event: content_block_delta\ndata: {"type":"content_block_delta",' ..
                 '"delta":{"text":"\\"usage\\": {"}}\n\n' ..
                 'event: message_delta\ndata: {"type":"message_delta",\ndata: "usage":' ..
                 '{"output_tokens":42}}\n\n'
    for k = 1, #body - 1 do
        local txn = H.txn({})
        H.feed(Capture, txn, body, { resp = true, splits = { k } })
        eq(txn.vars["txn.tally.cap"], "c2 s " .. #body .. ' {"n":3,"ws":0,"ev":[' ..
            '{"r":"fs","e":"message_start","d":{"type":"message_start","message":' ..
            '{"model":"c","usage":{"input_tokens": 10}}}},' ..
            '{"r":"l","e":"message_delta","d":{"type":"message_delta","usage":' ..
            '{"output_tokens":42}}}]}', "cap at split " .. k)
    end
end)

test("a summary too long for the record keeps the last usage event only", function()
    local name = string.rep("m", 1400)
    local function ev(n)
        return 'data: {"model":"' .. name .. '","usage":{"prompt_tokens":' .. n ..
               ',"pad":"' .. string.rep("p", 1400) .. '"}}\n\n'
    end
    local body = 'data: {"model":"' .. name .. '","x":1}\n\n' .. ev(1) .. ev(7)
    local txn = H.txn({})
    H.feed(Capture, txn, body, { resp = true })
    local cap = txn.vars["txn.tally.cap"]
    local head = "c2 s " .. #body .. ' {"n":3,"ws":0,"ev":[{"r":"l",'
    eq(cap:sub(1, #head), head, "head")
    eq(select(2, cap:gsub('"r":', "")), 1, "one event kept")
    eq(cap:find('"prompt_tokens":7', 1, true) ~= nil, true, "the last usage")
    eq(#cap < 6200, true, "fits")
end)

test("web searches are counted as the answer passes, split or not", function()
    local ev = 'data: {"type":"response.web_search_call.completed","item_id":"ws"}\n\n'
    local body = ev .. 'data: {"type":"x"}\n\n' .. ev
    for k = 1, #body - 1 do
        local txn = H.txn({ ["txn.tally.count_searches"] = 1 })
        H.feed(Capture, txn, body, { resp = true, splits = { k } })
        eq(txn.vars["txn.tally.u_ws"], 2, "searches at split " .. k)
    end
end)

test("tally-pause sleeps and drops the stale verdict", function()
    local txn = H.txn({ ["txn.tally.verdict"] = "x", ["txn.tally.wait"] = 1 })
    H.actions["tally-pause"](txn)
    eq(txn.vars["txn.tally.verdict"], nil, "verdict")
    eq(txn.vars["txn.tally.wait"], 0, "wait")
    eq(H.slept > 0, true, "slept")
end)

U.run(arg)
