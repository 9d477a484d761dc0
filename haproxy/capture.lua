-- tally usage capture: reads a response body by its JSON structure as it passes and
-- hands the members the agent bills by (usage, model, id, tier: see "The answer, read
-- by its structure") to the end-of-transaction log record (txn.tally.cap). The body
-- itself passes untouched, with one exception below (the usage event the gateway asked
-- for on the client's behalf).
--
-- Loaded with lua-load-per-thread (a shared lua-load crashes HAProxy 2.6.12 with
-- nbthread > 1). Declared only on the _capture backends: every callback costs
-- 15-25 us, so a response that does not need capture must not meet this filter.
--
-- Record field: "c2 <kind> <body bytes> <summary>", kind s (event stream), j (JSON) or o
-- (other), told from the first byte that is not white space. Control bytes become
-- spaces: records travel one per line.
--
-- Amendment: an OpenAI stream whose client did not ask for usage is sent upstream with
-- stream_options.include_usage true, and its answer loses the usage event again, so
-- that the client sees the stream it asked for (client code indexing choices[0] of
-- every chunk would fail on it). The agent names the edit (txn.tally.amend: offset,
-- amend_cut: bytes replaced, amend_text: their replacement) when it saw the whole body;
-- tally.cfg has set Content-Length to the new length. For a body longer than the
-- agent saw (txn.tally.amend_scan), this filter reads the top level of the whole body
-- as it passes (any API's: only an OpenAI body gets an amend_text) and, before its
-- closing brace, puts amend_text when it is a stream that did not ask for usage, or as
-- many spaces otherwise (the length was raised by that much before the body went
-- out). Members that the agent's rules (spoa/reqbody.c)
-- refuse in a whole body, a second "model", "stream" or "stream_options" or one that
-- only some JSON readers take for it, spoil the body (a NUL byte) before its end
-- reaches the upstream, which then cannot read it. So does, for a key restricted to some
-- models (or with budgets per model) whose body named none before the cut, a "model"
-- not on txn.tally.allow. A
-- spoil also writes the refusal the agent gives such a whole body (txn.tally.spoiled,
-- txn.tally.body), which tally.cfg answers in place of the upstream's answer.
-- A body without a Content-Length that passes the body cap is spoiled there too
-- (cut_too_large). The scanner that reads such a body's members and spoils it is
-- haproxy/scanner.lua, loaded before this file into the same per-thread Lua state:
-- its methods (the global TallyScanner) are this filter's own.
--
-- Also here: the tally-pause action (end of file).

-- A key longer than this is none the answer reader keeps, escapes and all.
local KEY_MAX = 96

-- As upvalues: a global's field costs two table lookups per use.
local find, sub, byte = string.find, string.sub, string.byte

local Capture = {}
Capture.id = "tally-capture"
Capture.flags = filter.FLT_CFG_FL_HTX
Capture.__index = Capture
for name, method in pairs(TallyScanner) do
    Capture[name] = method
end

function Capture:new()
    return setmetatable({ n = 0, held = 0 }, Capture)
end

function Capture:start_analyze(txn, chn)
    if chn:is_resp() then
        -- OpenAI's web searches, which its usage does not count: a stream's
        -- response.web_search_call.completed events, or a JSON answer's web_search_call
        -- output items, counted into txn.tally.u_ws as the answer passes.
        if txn:get_var("txn.tally.count_searches") then
            self.count_ws = true
            txn:set_var("txn.tally.u_ws", 0)
        end
        filter.register_data_filter(self, chn)
        return
    end
    local text = txn:get_var("txn.tally.amend_text")
    local scan = txn:get_var("txn.tally.amend_scan")
    if not text and not scan then
        return
    end
    -- Scanning without a text: the part seen settled the amendment, the rest is only
    -- checked (the body keeps its length).
    self.text = text or ""
    if scan then
        self:scan_start(txn)
        -- A body with a Content-Length was held to the cap by tally.cfg already.
        if not txn.f:req_hdr("content-length") then
            self.max_body = txn:get_var("proc.tally_max_body")
            self.api = (txn.f:path() or ""):find("^/v1/messages") and "a" or "o"
        end
    else
        self.insert_at = txn:get_var("txn.tally.amend")
        self.cut = txn:get_var("txn.tally.amend_cut") or 0
        self.amend = true
    end
    filter.register_data_filter(self, chn)
end

-- ---- The answer, read by its structure ----
-- The usage, model, id and tier of an answer are the members at their documented paths
-- of the answer's JSON (or of each event's data in a stream), and nowhere else: text the
-- client sent and the upstream echoes (a Responses answer repeats instructions, tools,
-- text and metadata around its usage) is read as what it is, a string or a member at
-- another path. The reader follows the JSON's nesting chunk by chunk; strings are
-- skipped with plain finds (memchr), so the cost is per quote, escape and bracket.
--
-- What it keeps: the members that WANT_* name, each its raw JSON text (control bytes as
-- spaces), the first of a duplicated name (as cJSON and json_query take it). An event
-- stream's events are read whole (their data joined, up to EVENT_BUF, then as they
-- pass); an event is read only when it may hold a usage object (its data has a "usage"
-- key before a '{', or an escape that could spell one), or is the first, or may be a
-- web search. spoa/usage.c reads the summary this builds (record field txn.tally.cap):
--   c2 j <body bytes> {"a":<answer's kept members>,"ws":<web searches>}
--   c2 s <body bytes> {"n":<events>,"ws":<web searches>,"ev":[{"r":"<roles>","e":"<event
--       name>","d":<the event data's kept members>},...]}
-- with roles f (the first event), s (the first with a usage object), l (the last one).
-- Kind o (neither JSON nor a stream) keeps nothing: c2 o <body bytes> {}.

-- A kept member's text; a longer one is not kept (no usage object comes near it).
local VALUE_MAX = 1536
-- An event's data held whole before it is read; a longer one is read as it passes.
local EVENT_BUF = 32768
-- An event's name (the "event:" line) longer than this is no provider's.
local NAME_MAX = 64
-- "v": keep the value; a table: read the object's members; "ws": a web search if it is
-- "web_search_call"; ["[]"]: what each element of an array is.
local WANT_ANSWER = {
    model = "v", usage = "v", id = "v", service_tier = "v", type = "v",
    output = { ["[]"] = { type = "ws" } },
}
local WANT_EVENT = {
    model = "v", usage = "v", id = "v", service_tier = "v", type = "v",
    message = { model = "v", usage = "v", id = "v" },
    response = { model = "v", usage = "v", id = "v", service_tier = "v" },
}
-- The order members are written in the summary.
local KEPT = { "type", "id", "model", "service_tier", "usage" }
local NESTED = { "message", "response" }
-- The type of an event that is one of OpenAI's web searches.
local SEARCH_EVENT = '"response.web_search_call.completed"'

-- JSON string escapes, for the rare key that has them.
local ESCAPES = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n",
                  r = "\r", t = "\t" }

-- A key's name as JSON readers decode it; nil when it has an escape no name we read
-- can hold (a \u beyond ASCII, or a broken one).
local function key_decode(raw)
    if not raw:find("\\", 1, true) then
        return raw
    end
    local out, i, n = {}, 1, #raw
    while i <= n do
        local b = raw:find("\\", i, true)
        if not b then
            out[#out + 1] = raw:sub(i)
            break
        end
        out[#out + 1] = raw:sub(i, b - 1)
        local c = raw:sub(b + 1, b + 1)
        if c == "u" then
            local hex = raw:match("^%x%x%x%x", b + 2)
            local v = hex and tonumber(hex, 16)
            if not v or v > 0x7f then
                return nil
            end
            out[#out + 1] = string.char(v)
            i = b + 6
        elseif ESCAPES[c] then
            out[#out + 1] = ESCAPES[c]
            i = b + 2
        else
            return nil
        end
    end
    return table.concat(out)
end

-- Where the JSON string that goes on at data[i] ends (its closing quote), nil if not
-- in data: the first quote after an even run of backslashes. Plain finds (memchr): the
-- cost is per quote, not per byte.
local function string_end(data, i, n)
    local e = find(data, '"', i, true)
    while e do
        local k = e - 1
        while k >= i and byte(data, k) == 92 do
            k = k - 1
        end
        if (e - 1 - k) % 2 == 0 then
            return e
        end
        e = find(data, '"', e + 1, true)
    end
    return nil
end

-- Where the JSON value at text[i] ends (the index after it), nil if it is not one: a
-- kept member's text is checked whole before it is kept, so that one broken member
-- (an upstream's) never spoils the summary the others share. Small texts only (at most
-- VALUE_MAX bytes): recursion is bounded by them.
local function json_value(t, i)
    i = find(t, "[^ \t\r\n]", i)
    if not i then
        return nil
    end
    local c = byte(t, i)
    if c == 34 then
        local e = string_end(t, i + 1, #t)
        if not e then
            return nil
        end
        -- JSON has no raw control byte in a string (the summary would turn it into a
        -- space, another string).
        local ctl = t:find("[\0-\31]", i + 1)
        local bad = ctl ~= nil and ctl < e
        t:sub(i + 1, e - 1):gsub("\\(.)(%x?%x?%x?%x?)", function(x, hex)
            if not (ESCAPES[x] or (x == "u" and #hex == 4)) then
                bad = true
            end
        end)
        return not bad and e + 1 or nil
    end
    if c == 123 or c == 91 then
        local close = c == 123 and 125 or 93
        i = find(t, "[^ \t\r\n]", i + 1)
        if i and byte(t, i) == close then
            return i + 1
        end
        while i do
            if c == 123 then
                if byte(t, i) ~= 34 then
                    return nil
                end
                i = json_value(t, i)
                i = i and find(t, "[^ \t\r\n]", i)
                if not i or byte(t, i) ~= 58 then
                    return nil
                end
                i = i + 1
            end
            i = json_value(t, i)
            i = i and find(t, "[^ \t\r\n]", i)
            if not i then
                return nil
            end
            local b = byte(t, i)
            if b == close then
                return i + 1
            end
            if b ~= 44 then
                return nil
            end
            i = find(t, "[^ \t\r\n]", i + 1)
        end
        return nil
    end
    local _, e = find(t, "^-?%d+%.?%d*[eE]?[-+]?%d*", i)
    if e then
        return e + 1
    end
    for _, word in ipairs({ "true", "false", "null" }) do
        if t:sub(i, i + #word - 1) == word then
            return i + #word
        end
    end
    return nil
end

-- A reader of one JSON text (an answer, or one event's data) given chunk by chunk.
local function reader_new(want)
    return { depth = 0, nodes = {}, isobj = {}, paths = {}, seen = {}, phase = "value",
             want = want, out = {}, kept = 0, ws = 0, instr = false, esc = false }
end

-- The kept value ended: its raw text becomes out[path] (or a web search).
local function reader_keep(r)
    local cap = r.cap
    r.cap = nil
    if cap.over then
        return
    end
    local text = table.concat(cap.parts):match("^%s*(.-)%s*$")
    if json_value(text, 1) ~= #text + 1 then
        return
    end
    if cap.kind == "ws" then
        if text == '"web_search_call"' then
            r.ws = r.ws + 1
        end
    elseif #text > 0 and not r.out[cap.path] and
           not (text:byte(1) == 34 and text:find("\\u0000", 1, true)) then
        -- (A NUL hidden by an escape would cut a name where C reads it: no such string
        -- is kept.)
        r.out[cap.path] = text:gsub("[\0-\31]", " ")
        r.kept = r.kept + 1
    end
end

-- More raw text of the value being kept.
local function reader_more(r, text)
    local cap = r.cap
    if cap.over then
        return
    end
    cap.len = cap.len + #text
    if cap.len > VALUE_MAX then
        cap.over, cap.parts = true, nil
        return
    end
    cap.parts[#cap.parts + 1] = text
end

-- A key of the object at depth d ended: what its value is to us.
local function reader_key(r, raw)
    local d = r.depth
    local name = #raw <= KEY_MAX and key_decode(raw)
    local seen = r.seen[d]
    local node = name and r.nodes[d][name]
    if node and seen[name] then
        -- A duplicate: the first one is what is read.
        node = nil
    end
    if name then
        seen[name] = true
    end
    r.pend = node
    r.pname = name
    r.phase = "colon"
end

-- Reads data, the next bytes of the JSON text.
local function reader_read(r, data)
    if r.done then
        return
    end
    local i, n = 1, #data
    local cfrom = r.cap and 1
    local kfrom = r.key and 1
    while i <= n do
        if r.instr then
            if r.esc then
                -- The byte after a backslash that ended the previous read.
                r.esc = false
                i = i + 1
            else
                local q = string_end(data, i, n)
                if not q then
                    -- An odd run of backslashes at the end escapes the next read's
                    -- first byte.
                    local k = n
                    while k >= i and byte(data, k) == 92 do
                        k = k - 1
                    end
                    r.esc = (n - k) % 2 == 1
                    break
                end
                r.instr = false
                i = q + 1
                if kfrom then
                    reader_key(r, r.key .. sub(data, kfrom, q - 1))
                    r.key, kfrom = nil, nil
                end
            end
        elseif r.depth > 0 and not r.nodes[r.depth] then
            -- Inside a container nothing is read from (most of an answer): only its
            -- nesting and its strings matter, each string skipped to the first quote
            -- that no backslash escapes.
            local q = find(data, '[%[%]{}"]', i)
            if not q then
                break
            end
            local c = byte(data, q)
            i = q + 1
            if c == 34 then
                local e = string_end(data, i, n)
                if e then
                    i = e + 1
                else
                    -- The string goes on in the next read: read on as strings are.
                    r.instr = true
                end
            elseif c == 123 or c == 91 then
                local d = r.depth + 1
                r.depth = d
                r.isobj[d] = c == 123
                r.nodes[d] = false
            else
                local d = r.depth - 1
                r.depth = d
                if d > 0 and r.isobj[d] and r.nodes[d] then
                    r.phase = "after"
                end
            end
        else
            local q = find(data, '["{}%[%],:]', i)
            if not q then
                break
            end
            local c = byte(data, q)
            i = q + 1
            local d = r.depth
            if c == 34 then
                -- A key and its colon, or a value's string, taken at once when they are
                -- plain and whole in this read (one find, not a turn of this loop each);
                -- else read on as strings are.
                if r.isobj[d] and r.nodes[d] and r.phase == "key" then
                    local _, e, raw = find(data, '^([^"\\]*)"%s*:', i)
                    if e then
                        reader_key(r, raw)
                        r.phase = "value"
                        local p = r.pend
                        i = e + 1
                        if p == "v" or p == "ws" then
                            r.cap = { depth = d, parts = {}, len = 0, kind = p,
                                      path = (r.paths[d] or "") .. r.pname }
                            cfrom = i
                        elseif not p then
                            -- Nothing read from it: a plain value and its comma too.
                            _, e = find(data, '^%s*"[^"\\]*"%s*,', i)
                            if not e then
                                _, e = find(data, '^[^"{}%[%],:]*,', i)
                            end
                            if e then
                                r.phase, i = "key", e + 1
                            end
                        end
                    else
                        r.instr = true
                        r.key, kfrom = "", i
                    end
                else
                    local e = string_end(data, i, n)
                    if e then
                        i = e + 1
                    else
                        r.instr = true
                    end
                end
            elseif c == 123 or c == 91 then
                -- What the new container is to us: the wanted members of the value of a
                -- kept object's member, or an element of a wanted array.
                local node
                if d == 0 then
                    node = c == 123 and r.want or nil
                elseif r.isobj[d] then
                    if r.nodes[d] and r.phase == "value" and type(r.pend) == "table" then
                        node = r.pend
                        r.paths[d + 1] = (r.paths[d] or "") .. r.pname .. "."
                    end
                    r.pend = nil
                elseif r.nodes[d] then
                    node = r.nodes[d]["[]"]
                    r.paths[d + 1] = r.paths[d]
                end
                d = d + 1
                r.depth = d
                r.isobj[d] = c == 123
                r.nodes[d] = node or false
                if c == 123 and node then
                    r.seen[d] = {}
                    r.phase = "key"
                end
            elseif c == 125 or c == 93 then
                if r.cap and r.cap.depth == d then
                    if cfrom then
                        reader_more(r, sub(data, cfrom, q - 1))
                        cfrom = nil
                    end
                    reader_keep(r)
                end
                d = d - 1
                r.depth = d
                if d <= 0 then
                    -- The value ended (or more closed than opened): whatever follows is
                    -- no part of it, and nothing more is read.
                    r.done = true
                    return
                end
                if r.isobj[d] and r.nodes[d] then
                    r.phase = "after"
                end
            elseif c == 58 then
                if r.isobj[d] and r.nodes[d] and r.phase == "colon" then
                    r.phase = "value"
                    local p = r.pend
                    if p == "v" or p == "ws" then
                        r.cap = { depth = d, parts = {}, len = 0, kind = p,
                                  path = (r.paths[d] or "") .. r.pname }
                        cfrom = q + 1
                    end
                end
            elseif c == 44 then
                if r.cap and r.cap.depth == d then
                    if cfrom then
                        reader_more(r, sub(data, cfrom, q - 1))
                        cfrom = nil
                    end
                    reader_keep(r)
                end
                if r.isobj[d] and r.nodes[d] then
                    r.phase = "key"
                    r.pend = nil
                end
            end
        end
    end
    if kfrom and #r.key <= KEY_MAX then
        r.key = r.key .. sub(data, kfrom, kfrom + KEY_MAX)
    end
    if cfrom and r.cap then
        reader_more(r, sub(data, cfrom))
    end
end

-- The kept members of a reader as a JSON object's text, in a fixed order.
local function reader_summary(r)
    local out, parts = r.out, {}
    for _, name in ipairs(KEPT) do
        if out[name] then
            parts[#parts + 1] = string.format('"%s":%s', name, out[name])
        end
    end
    for _, parent in ipairs(NESTED) do
        local inner = {}
        for _, name in ipairs(KEPT) do
            local v = out[parent .. "." .. name]
            if v then
                inner[#inner + 1] = string.format('"%s":%s', name, v)
            end
        end
        if #inner > 0 then
            parts[#parts + 1] = string.format('"%s":{%s}', parent, table.concat(inner, ","))
        end
    end
    return "{" .. table.concat(parts, ",") .. "}"
end

-- Whether a kept member is an object (a usage that is not null).
local function is_object(text)
    return text ~= nil and text:byte(1) == 123
end

-- Whether an event's data, text[i..j], may hold what is read (see above): a "usage" key
-- before a '{' (a quote inside a JSON string is escaped, so these bytes are a key), an
-- escape of an ASCII letter or '_' (a key spelled with escapes), or, when ws, a web
-- search. What follows j is looked at only where a match starting before it goes on.
local function event_worth(text, i, j, ws)
    local p = find(text, 'usage"', i, true)
    while p and p <= j do
        if find(text, "^%s*:%s*{", p + 6) then
            return true
        end
        p = find(text, 'usage"', p + 6, true)
    end
    p = find(text, "\\u00", i, true)
    if p and p <= j then
        p = find(text, "\\u00[5-7]", p)
        if p and p <= j then
            return true
        end
    end
    if ws then
        p = find(text, "web_search_call", i, true)
        return p ~= nil and p <= j
    end
    return false
end

-- An event ended: read it if it may matter, and keep what it says.
function Capture:event_end(txn)
    local ev = self.ev
    self.ev = nil
    if not ev or not ev.data then
        return
    end
    self.events = self.events + 1
    local r = ev.reader
    if not r then
        local text = table.concat(ev.parts)
        if self.events > 1 and not event_worth(text, 1, #text, self.count_ws) then
            return
        end
        r = reader_new(WANT_EVENT)
        reader_read(r, text)
    end
    local out = r.out
    local kind = out.type or (ev.name and string.format('"%s"', ev.name))
    if self.count_ws and kind == SEARCH_EVENT then
        self.ws = self.ws + 1
        txn:set_var("txn.tally.u_ws", self.ws)
    end
    local usage = is_object(out.usage) or is_object(out["message.usage"]) or
                  is_object(out["response.usage"])
    if self.events > 1 and not usage then
        return
    end
    local kept = { e = ev.name or "", d = reader_summary(r) }
    if self.events == 1 then
        self.first = kept
    end
    if usage then
        self.start = self.start or kept
        self.last = kept
    end
    self:publish(txn)
end

-- More data of the current event (a data line's bytes, or the "\n" between two lines).
function Capture:event_data(text)
    local ev = self.ev
    ev.data = true
    if ev.reader then
        reader_read(ev.reader, text)
        return
    end
    ev.parts[#ev.parts + 1] = text
    ev.len = ev.len + #text
    if ev.len > EVENT_BUF then
        ev.reader = reader_new(WANT_EVENT)
        reader_read(ev.reader, table.concat(ev.parts))
        ev.parts = nil
    end
end

-- Counts the whole events at data[i] that are not read (not the first, not worth
-- reading) and have the usual shape: an optional "event:" line, one "data: " line and
-- an empty line, LF only. Returns where the rest begins, for stream_read. Most reads of
-- a stream are one such event: this takes it in a few finds and a few dozen Lua
-- instructions where stream_read spends hundreds, and HAProxy 2.6 runs a filter under
-- a count hook, a call on every instruction (issue 28, docs/architecture.md).
local function skip_events(self, data, i)
    local events, ws, n = self.events, self.count_ws, #data
    while i <= n do
        local _, e, from = find(data, "^data: ()[^\n]*[^\r\n]\n\n", i)
        if not e then
            _, e, from = find(data, "^event:[^\n]*\ndata: ()[^\n]*[^\r\n]\n\n", i)
        end
        if not e or event_worth(data, from, e - 2, ws) then
            break
        end
        events = events + 1
        i = e + 1
    end
    self.events = events
    return i
end

-- Reads an event stream's bytes from data[i]: lines of "field: value", an empty line
-- ending each event. A line is classified by its first bytes (held in self.lead until
-- there are enough); a data line's bytes go to the event as they come.
function Capture:stream_read(txn, data, i)
    local n = #data
    while i <= n do
        local e = find(data, "\n", i, true)
        local stop = e and e - 1 or n
        if self.field == nil then
            -- A line starts: what field is it? (Its first bytes may be split.)
            local had = #self.lead
            local head = self.lead .. sub(data, i, stop < i + 5 and stop or i + 5)
            self.lead = ""
            if e and (head == "" or head == "\r") then
                self:event_end(txn)
                i = e + 1
                goto continue
            end
            if sub(head, 1, 5) == "data:" then
                self.field = "data"
                i = i + 5 - had
                if i > n then
                    -- The optional space may begin the next read.
                    self.space = true
                elseif byte(data, i) == 32 then
                    i = i + 1
                end
                self.ev = self.ev or { parts = {}, len = 0 }
                if self.ev.data then
                    self:event_data("\n")
                end
            elseif sub(head, 1, 6) == "event:" then
                self.field = "event"
                i = i + 6 - had
                self.name = ""
            elseif not e and #head < 6 and (head == "\r" or ("data:"):sub(1, #head) == head or
                                            ("event:"):sub(1, #head) == head) then
                self.lead = head
                return
            else
                self.field = "other"
            end
        end
        if self.field == "data" and i <= stop then
            if self.space then
                self.space = nil
                if byte(data, i) == 32 then
                    i = i + 1
                end
            end
            local last = stop
            if e and byte(data, stop) == 13 then
                last = stop - 1
            end
            if i <= last then
                self:event_data(sub(data, i, last))
            end
        elseif self.field == "event" and i <= stop and #self.name <= NAME_MAX then
            self.name = self.name .. sub(data, i, stop)
        end
        if e then
            if self.field == "event" then
                local name = self.name:match("^ ?([%w%._%-]*)\r?$")
                self.ev = self.ev or { parts = {}, len = 0 }
                self.ev.name = name and #name <= NAME_MAX and name or nil
            end
            self.field, self.space = nil, nil
        end
        i = stop + 2
        ::continue::
    end
end

-- The summary the agent reads (record field txn.tally.cap; format above). The record
-- must fit HAProxy's log line (8192 bytes, tally.cfg: one cut short fails its MAC and
-- is refused whole): a summary longer than SUMMARY_MAX keeps fewer events, the last
-- usage event's first, then none (no usage: the agent charges its estimate).
local SUMMARY_MAX = 6144

function Capture:publish(txn)
    local body
    if self.kind == "s" then
        body = self:stream_summary({ "first", "start", "last" })
        if #body > SUMMARY_MAX then
            body = self:stream_summary({ "last" })
        end
        if #body > SUMMARY_MAX then
            body = self:stream_summary({})
        end
    elseif self.kind == "j" then
        body = string.format('{"a":%s,"ws":%d}', reader_summary(self.reader), self.reader.ws)
        if #body > SUMMARY_MAX then
            body = string.format('{"a":{},"ws":%d}', self.reader.ws)
        end
    else
        body = "{}"
    end
    txn:set_var("txn.tally.cap", string.format("c2 %s %d %s", self.kind or "o", self.n, body))
end

-- A stream's summary with the kept events of the roles named.
function Capture:stream_summary(roles)
    local list, seen = {}, {}
    for _, role in ipairs(roles) do
        local ev = self[role]
        if ev and not seen[ev] then
            seen[ev] = true
            local r = (ev == self.first and "f" or "") .. (ev == self.start and "s" or "") ..
                      (ev == self.last and "l" or "")
            list[#list + 1] = string.format('{"r":"%s","e":"%s","d":%s}', r, ev.e, ev.d)
        end
    end
    return string.format('{"n":%d,"ws":%d,"ev":[%s]}', self.events, self.ws,
                         table.concat(list, ","))
end

-- Reads the len new bytes at offset off of the message's input.
function Capture:keep(txn, msg, off, len)
    self.n = self.n + len
    local data = msg:body(off, len) or ""
    local i = 1
    if self.kind == "s" then
        if self.events > 0 and not self.ev and not self.field and self.lead == "" then
            i = skip_events(self, data, 1)
        end
    elseif not self.kind then
        -- The kind, told from the first byte that is not white space.
        local first = data:match("^%s*()%S")
        if not first then
            return
        end
        local c = data:sub(first, first)
        if c == "{" then
            self.kind, self.reader = "j", reader_new(WANT_ANSWER)
        elseif c == "d" or c == "e" or c == ":" then
            self.kind, self.events, self.ws, self.lead = "s", 0, 0, ""
        else
            self.kind = "o"
        end
        data = data:sub(first)
    end
    if self.kind == "j" then
        local r = self.reader
        local kept, ws = r.kept, r.ws
        reader_read(r, data)
        if r.ws ~= ws and self.count_ws then
            txn:set_var("txn.tally.u_ws", r.ws)
        end
        -- Published as soon as something is kept: an answer cut later (client or
        -- upstream gone) may end without end_analyze running before the record.
        if r.kept ~= kept or not self.published then
            self.published = true
            self:publish(txn)
        end
    elseif self.kind == "s" and i <= #data then
        self:stream_read(txn, data, i)
    end
end

-- Removes the usage event from an amended stream. Returns how many bytes may go to
-- the client: an event is held back until it is whole, so that a usage event split
-- across reads is still recognised; at the message's end everything goes.
function Capture:strip(msg, avail)
    local data = msg:body(0, avail) or ""
    local eom = msg:eom()
    -- A plain find (memchr) for the key, a pattern only where it stands: this runs on
    -- every read of every amended stream, and each chunk carries "usage":null.
    local u = data:find('"usage"', 1, true)
    while u and not data:find('^%s*:%s*{', u + 7) do
        u = data:find('"usage"', u + 7, true)
    end
    if u then
        local start = 1
        for s in data:sub(1, u):gmatch("()data:") do
            start = s
        end
        local stop = data:find("\n\n", u, true)
        local crlf = data:find("\r\n\r\n", u, true)
        local gap = 2
        if crlf and (not stop or crlf < stop) then
            stop, gap = crlf, 4
        end
        if not stop and eom then
            -- The last event, without its blank line.
            stop, gap = #data + 1, 0
        end
        if stop then
            msg:remove(start - 1, stop + gap - start)
            self.amend = nil
            return avail - (stop + gap - start)
        end
        return start - 1
    end
    if eom then
        return avail
    end
    local last = 0
    for e in data:gmatch("\n\r?\n()") do
        last = e - 1
    end
    return last
end

-- The verdict on a spoiled body and the refusal HAProxy answers in place of the
-- upstream's (tally.cfg), in the error shape of the path's API.
local SPOILED_MESSAGE = "The request asks, past the part of its body the gateway reads "
    .. "before forwarding it, for what this key may not have (%s); nothing was served."

function Capture:tell_spoiled(txn, why)
    local msg = string.format(SPOILED_MESSAGE, why)
    local kind = why == "model_not_allowed" and "permission_error" or "invalid_request_error"
    local id = txn.f:unique_id()
    local body
    if txn:get_var("txn.tally.anthropic") then
        body = string.format('{"type":"error","error":{"type":"%s","message":"%s"},'
            .. '"request_id":"%s"}', kind, msg, id)
    else
        body = string.format('{"error":{"message":"%s","type":"%s","param":null,'
            .. '"code":"%s"},"request_id":"%s"}', msg, kind, why, id)
    end
    txn:set_var("txn.tally.body", body)
    txn:set_var("txn.tally.spoiled", why)
end

-- A body whose size was not announced (chunked) is spoiled once it passes the cap
-- (tally.cfg, TALLY_MAX_BODY, refuses announced ones), so that the upstream refuses
-- it, and the rest passes unread (removing it stalled the message's end: tested on
-- 2.6); txn.tally.too_large (a: an Anthropic path, o: another) has tally.cfg answer
-- 413 in the API's shape in place of the upstream's refusal. Returns the bytes to
-- forward.
function Capture:cut_too_large(txn, msg, avail)
    local sc = self.scan
    if not sc.over then
        sc.over = true
        txn:set_var("txn.tally.too_large", self.api)
        msg:set("\0", 0, 1)
    end
    return avail
end

function Capture:http_payload(txn, msg)
    local avail = msg:input()
    -- Only an amended request has its data filtered (start_analyze, self.text): a
    -- response's reads skip the call.
    if self.text and not msg:is_resp() then
        if self.scan then
            -- The client's bytes: what passed and waits, less what the amendment added,
            -- and less the one byte a chunked message's end counts (its trailers).
            local sc = self.scan
            local grown = (sc.done and #self.text or sc.delta) + (msg:eom() and 1 or 0)
            if sc.over or (self.max_body and sc.passed + avail - grown > self.max_body) then
                return self:cut_too_large(txn, msg, avail)
            end
            local fwd = self:scan_request(msg)
            sc.passed = sc.passed + fwd
            if sc.spoiled and not self.told then
                self:tell_spoiled(txn, sc.spoiled)
                self.told = true
            end
            return fwd
        end
        if self.insert_at and avail >= self.insert_at + self.cut then
            msg:set(self.text, self.insert_at, self.cut)
            self.insert_at = nil
        end
        return
    end
    local new = avail - self.held
    if new > 0 then
        self:keep(txn, msg, self.held, new)
    end
    if self.amend and self.event_stream == nil then
        -- Only an event stream carries a usage event to take out: any other answer (an
        -- error's JSON, whatever its status) goes to the client whole, at once.
        local ct = txn.f:res_hdr("content-type") or ""
        self.event_stream = ct:lower():find("text/event-stream", 1, true) ~= nil
    end
    if not (self.amend and self.event_stream) then
        self.held = 0
        return
    end
    local fwd = self:strip(msg, avail)
    self.held = msg:input() - fwd
    return fwd
end

-- Called on the response's end, and when it is cut (client or upstream gone).
function Capture:end_analyze(txn, chn)
    if chn:is_resp() and self.n > 0 then
        -- A stream's last event may end without its empty line.
        if self.kind == "s" and self.ev then
            self:event_end(txn)
        end
        self:publish(txn)
    end
end

core.register_filter("tally-capture", Capture, function(flt, args)
    return flt
end)

-- A pause before the agent is asked again about a stored response's id that the key
-- may have just made (tally.cfg, txn.tally.wait): msleep yields, so the thread serves
-- other streams meanwhile. wait 0 marks the pause as taken; the verdict goes, so that
-- an agent that fails to answer again meets the fail policy, not the stale refusal.
local PAUSE_MS = 25

core.register_action("tally-pause", { "http-req" }, function(txn)
    core.msleep(PAUSE_MS)
    txn:set_var("txn.tally.wait", 0)
    txn:unset_var("txn.tally.verdict")
    txn:unset_var("txn.tally.status")
    txn:unset_var("txn.tally.body")
end, 0)
