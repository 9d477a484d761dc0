-- Unit tests of haproxy/scanner.lua loaded alone (no capture.lua) under a stock Lua (5.3
-- and 5.4, tests/test_lua.py runs both): a filter made of the scanner's methods and
-- nothing else reads a cut request body at every split point, and where the body is
-- spoiled and with which verdict is checked byte for byte. tests/lua/test_capture.lua
-- holds the same rules through the whole filter, over many more bodies.
-- Run from the repository root: lua5.4 tests/lua/test_scanner.lua [name...]
package.path = "tests/lua/?.lua;" .. package.path
local H = require("haproxy")
local U = require("unit")
local Scanner = H.load_scanner("haproxy")
local test, eq = U.test, U.eq

-- The smallest filter the scanner runs in: the request's callbacks, the verdict told as
-- capture.lua tells it (txn.tally.spoiled).
local Scan = setmetatable({}, { __index = Scanner })
Scan.__index = Scan

function Scan:new()
    return setmetatable({}, Scan)
end

function Scan:start_analyze(txn, chn)
    self.text = txn:get_var("txn.tally.amend_text") or ""
    self:scan_start(txn)
    filter.register_data_filter(self, chn)
end

function Scan:http_payload(txn, msg)
    local fwd = self:scan_request(msg)
    txn:set_var("txn.tally.spoiled", self.scan.spoiled)
    return fwd
end

-- body read with the agent's txnvars gives want (a NUL where it is spoiled) and the
-- verdict why (nil: not spoiled), however it is split.
local function scans(body, txnvars, want, why)
    U.every_split(Scan, body, txnvars, function(out, txn)
        eq(out, want, "body")
        eq(txn.vars["txn.tally.spoiled"], why, "verdict")
    end)
end

test("the scanner loads alone and names nothing of the filter's", function()
    eq(H.filters["tally-capture"], nil, "filter registered")
    eq(type(Scanner.scan_request), "function", "scan_request")
    eq(Scanner.http_payload, nil, "http_payload")
end)

test("a judged member past the cut is spoiled where it is named again", function()
    scans('{"model":"a","messages":[],"model":"b"}', {},
        '{"model":"a","messages":[],"model\0:"b"}', "invalid_body")
    scans('{"model":"a","metadata":{"model":"b"}}', {},
        '{"model":"a","metadata":{"model":"b"}}', nil)
end)

test("a costly tool is marked at its type, the client's own pass", function()
    local body = '{"tools":[{"type":"function"},{"type":"file_search"}],"model":"m"}'
    scans(body, { ["txn.tally.costly"] = "o" },
        '{"tools":[{"type":"function"},{"type":"file_search\0}],"model":"m"}',
        "unsupported_value")
    -- Only web search refused: a provider's file search is no web search.
    scans(body, { ["txn.tally.costly"] = "w" }, body, nil)
    scans('{"tools":[{"type":"web_search_preview"}]}', { ["txn.tally.costly"] = "w" },
        '{"tools":[{"type":"web_search_preview\0}]}', "unsupported_value")
end)

test("a key folded by escapes or Unicode is recognised", function()
    scans('{"mod\\u0065l":"b"}', {}, '{"mod\\u0065l\0:"b"}', "invalid_body")
    -- U+017F (long s) folds to s in Go's reader: "stream" and "modalities".
    scans('{"\197\191tream":true}', {}, '{"\197\191tream\0:true}', "invalid_body")
    scans('{"modalitie\197\191":["text"]}', { ["txn.tally.costly"] = "a" },
        '{"modalitie\197\191\0:["text"]}', "unsupported_value")
    -- U+212A (Kelvin sign) folds to k: "key" is no member anyone judges.
    scans('{"\226\132\170ey":1}', {}, '{"\226\132\170ey":1}', nil)
    -- Stored state however spelled, for a cut Responses body that may have none.
    scans('{"previous_response\\u005fid":"r"}', { ["txn.tally.nostate"] = 1 },
        '{"previous_response\\u005fid\0:"r"}', "unsupported_parameter")
end)

U.run(arg)
