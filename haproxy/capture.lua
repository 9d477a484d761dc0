-- tally usage capture: keeps the first and last bytes of a response body and hands
-- them to the end-of-transaction log record (txn.tally.cap), where the agent reads the
-- usage the upstream reported. The body itself passes untouched, with one exception
-- below (the usage event the gateway asked for on the client's behalf).
--
-- Loaded with lua-load-per-thread (a shared lua-load crashes HAProxy 2.6.12 with
-- nbthread > 1). Declared only on the _capture backends: every callback costs
-- 15-25 us, so a response that does not need capture must not meet this filter.
--
-- Record field: "c1 <kind> <body bytes> <head len> <tail len> <head><tail>", kind s
-- (event stream), j (JSON) or o (other), told from the first bytes. Head is the first
-- HEAD bytes, tail the last TAIL bytes after the head: together the whole body when it
-- is short enough. Control bytes become spaces: records travel one per line.
--
-- Amendment: an OpenAI stream whose client did not ask for usage is sent upstream with
-- stream_options.include_usage true, and its answer loses the usage event again, so
-- that the client sees the stream it asked for (client code indexing choices[0] of
-- every chunk would fail on it). The agent names the edit (txn.tally.amend: offset,
-- amend_cut: bytes replaced, amend_text: their replacement) when it saw the whole body;
-- haproxy.cfg has set Content-Length to the new length. For a body longer than the
-- agent saw (txn.tally.amend_scan), this filter reads the top level of the whole body
-- as it passes (any API's: only an OpenAI body gets an amend_text) and, before its
-- closing brace, puts amend_text when it is a stream that did not ask for usage, or as
-- many spaces otherwise (the length was raised by that much before the body went
-- out). Members that the agent's rules (spoa/reqbody.c)
-- refuse in a whole body, a second "model", "stream" or "stream_options" or one that
-- only some JSON readers take for it, spoil the body (a NUL byte) before its end
-- reaches the upstream, which then refuses it. So does, for a key restricted to some
-- models whose body named none before the cut, a "model" not on txn.tally.allow.
-- A body without a Content-Length that passes the body cap is spoiled there too
-- (cut_too_large).
--
-- Also here, as HAProxy loads one Lua file: the tally-pause action (end of file).

local HEAD = 1536
local TAIL = 3072
-- A stream_options value longer than this is no plain {"include_usage": true}.
local OPTIONS_MAX = 256
-- A key longer than this cannot spell a judged member, escapes and all (6 bytes each).
local KEY_MAX = 96
local JUDGED = { model = true, stream = true, stream_options = true, service_tier = true }
-- Members past the cut that cost more than their tokens (docs/pricing.md), by the letter
-- the agent sends for what the key may not ask for (txn.tally.costly, spoa/decision.c:
-- 'o' tools the provider runs, 'w' web searches, 'a' audio output).
local COSTLY = { web_search_options = "o", mcp_servers = "o", audio = "a", modalities = "a" }
-- The client's own tools, by type (as spoa/reqbody.c's reqbody_tool_kind): any other
-- type is one the provider runs.
local CLIENT_TOOLS = { ["function"] = true, custom = true, local_shell = true, shell = true,
                       apply_patch = true, computer_use_preview = true, namespace = true }
local CLIENT_TOOL_PREFIXES = { "bash_", "text_editor_", "computer_", "memory_" }
-- A tool's type longer than this is none a provider names.
local TYPE_MAX = 64
-- OpenAI's web searches, which its usage does not count (txn.tally.count_searches): a
-- stream's response.web_search_call.completed events, or a JSON answer's web_search_call
-- output items, counted into txn.tally.u_ws as the answer passes. A quote inside a JSON
-- string is escaped: no text the model writes can match. SEARCH_CARRY bytes of each
-- chunk are searched again with the next, for a match split between them.
local SEARCH_EVENT = '"type"%s*:%s*"response%.web_search_call%.completed"'
local SEARCH_ITEM = '"type"%s*:%s*"web_search_call"'
local SEARCH_CARRY = 64
-- Members naming state stored upstream, or that the gateway cannot account or keep to
-- their key (txn.tally.nostate: a cut Responses body; spoa/decision.c).
local STATEFUL = { previous_response_id = true, conversation = true, background = true,
                   request_id = true }

local Capture = {}
Capture.id = "tally-capture"
Capture.flags = filter.FLT_CFG_FL_HTX
Capture.__index = Capture

function Capture:new()
    return setmetatable({ n = 0, head = "", tail = "", held = 0 }, Capture)
end

-- The models a restricted key may have past the cut (txn.tally.allow, a name a line),
-- or nil when the agent judged the model itself.
local function allow_set(list)
    if not list then
        return nil
    end
    local set = {}
    for name in list:gmatch("[^\n]+") do
        set[name] = true
    end
    return set
end

function Capture:start_analyze(txn, chn)
    if chn:is_resp() then
        if txn:get_var("txn.tally.count_searches") then
            self.searches, self.carry = 0, ""
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
        self.scan = { depth = 0, phase = "key", seen = {}, held = 0, delta = 0, passed = 0 }
        -- A body with a Content-Length was held to the cap by haproxy.cfg already.
        if not txn.f:req_hdr("content-length") then
            self.max_body = txn:get_var("proc.tally_max_body")
            self.api = (txn.f:path() or ""):find("^/v1/messages") and "a" or "o"
        end
        self.allow = allow_set(txn:get_var("txn.tally.allow"))
        self.nostate = txn:get_var("txn.tally.nostate") ~= nil
        self.costly = txn:get_var("txn.tally.costly") or ""
        self.tiers = allow_set(txn:get_var("txn.tally.tiers"))
    else
        self.insert_at = txn:get_var("txn.tally.amend")
        self.cut = txn:get_var("txn.tally.amend_cut") or 0
        self.amend = true
    end
    filter.register_data_filter(self, chn)
end

function Capture:publish(txn)
    local kind = "o"
    local first = self.head:match("^%s*(%S)")
    if first == "{" then
        kind = "j"
    elseif self.head:find("^%s*data:") or self.head:find("^%s*event:") then
        kind = "s"
    end
    local cap = (self.head .. self.tail):gsub("%c", " ")
    txn:set_var("txn.tally.cap", string.format("c1 %s %d %d %d %s", kind, self.n,
        #self.head, #self.tail, cap))
end

-- Keeps head and tail of the len new bytes at offset off of the message's input.
function Capture:keep(txn, msg, off, len)
    self.n = self.n + len
    local data
    if len <= HEAD + TAIL then
        data = msg:body(off, len) or ""
    else
        -- A large chunk: copy only the parts kept.
        data = (msg:body(off, HEAD) or "") .. (msg:body(-TAIL) or "")
    end
    local need = HEAD - #self.head
    if need > 0 then
        self.head = self.head .. data:sub(1, need)
        data = data:sub(need + 1)
        -- A stream cut later (client or upstream gone) may end without end_analyze
        -- running before the record: the head alone still names the model and, for
        -- Anthropic, the input usage.
        self:publish(txn)
    end
    if #data >= TAIL then
        self.tail = data:sub(-TAIL)
    elseif #data > 0 then
        self.tail = (self.tail .. data):sub(-TAIL)
    end
end

-- Counts the web searches in data, the answer's next bytes (see SEARCH_EVENT).
function Capture:count_searches(txn, data)
    local text = self.carry .. data
    self.carry = text:sub(-SEARCH_CARRY)
    -- A plain find (memchr-fast) first: most chunks hold no search.
    if not text:find("web_search_call", 1, true) then
        return
    end
    -- An event stream may open with a comment line (":").
    local sse = self.head:find("^%s*[de:]")
    local pattern = sse and SEARCH_EVENT or SEARCH_ITEM
    local from = 1
    local before = #text - #data
    while true do
        local s, e = text:find(pattern, from)
        if not s then
            break
        end
        -- A match within the carried bytes was counted with the chunk before.
        if e > before then
            self.searches = self.searches + 1
        end
        from = e + 1
    end
    txn:set_var("txn.tally.u_ws", self.searches)
end

-- Whether a stream_options value asks for usage: a flat object of plain members with
-- include_usage, spelled exactly, true. Anything else does not (the gateway then adds
-- its own, which JSON readers that keep the last of duplicated keys take).
local function asks_usage(text)
    if not text or #text > OPTIONS_MAX then
        return false
    end
    local body = text:match("^{%s*(.-)%s*}$")
    if not body then
        return false
    end
    local asked = false
    for member in (body .. ","):gmatch("(.-),") do
        local key, value = member:match('^%s*"([%w_]*)"%s*:%s*([%w%.%-]+)%s*$')
        if not key then
            return false
        end
        if key:lower() == "include_usage" then
            if key ~= "include_usage" or asked or value ~= "true" then
                return false
            end
            asked = true
        end
    end
    return asked
end

-- A top-level key as some JSON reader may take it: case and Unicode folds applied.
local function fold_key(raw)
    return raw:gsub("\197\191", "s"):gsub("\226\132\170", "k"):lower()
end

-- A top-level key as sent: which judged member it names, and whether every JSON reader
-- agrees (an escape or a case or Unicode fold that only some readers apply: no).
local function judged_key(raw)
    if raw:find("\\", 1, true) then
        return nil, true
    end
    local folded = fold_key(raw)
    if not JUDGED[folded] then
        return nil, false
    end
    return folded, folded ~= raw
end

-- Whether text is a JSON list of plain strings (no escapes), white space allowed.
local function plain_list(text)
    local body = text:match("^%[(.*)%]$")
    if not body then
        return false
    end
    for item in (body .. ","):gmatch("(.-),") do
        if not item:match('^%s*"[^"\\]*"%s*$') then
            return false
        end
    end
    return true
end

-- The letter of txn.tally.costly a tool of this type falls under, or nil for the
-- client's own (an escape is a type nobody can judge).
local function tool_letter(t)
    if #t > TYPE_MAX or t:find("\\", 1, true) then
        return "o"
    end
    if t:sub(1, 10) == "web_search" then
        return "w"
    end
    if CLIENT_TOOLS[t] then
        return nil
    end
    for _, prefix in ipairs(CLIENT_TOOL_PREFIXES) do
        if #t > #prefix and t:sub(1, #prefix) == prefix then
            return nil
        end
    end
    return "o"
end

-- What goes before the closing brace: the amendment when the body is a stream that did
-- not ask for usage and has no stream_options of its own (one that said otherwise was
-- rewritten as it passed), else spaces, so that the length is what haproxy.cfg
-- announced.
function Capture:closing(sc)
    local pad = string.rep(" ", #self.text - sc.delta)
    if sc.spoiled or sc.stream ~= "true" or sc.asked or self.text == "" then
        return pad
    end
    self.amend = true
    if sc.rewritten then
        return pad
    end
    return self.text
end

-- Spoils the body at offset at (a byte not yet forwarded): a NUL, which every JSON
-- reader refuses.
local function spoil(msg, sc, at)
    msg:set("\0", at, 1)
    sc.spoiled = true
end

-- A top-level key ended at offset at: a judged member named twice, or one that only
-- some readers take for it, spoils the body there.
function Capture:key_end(msg, sc, raw, at)
    local name, variant = nil, false
    if #raw <= KEY_MAX then
        name, variant = judged_key(raw)
    end
    if variant or (name and sc.seen[name]) then
        spoil(msg, sc, at)
    end
    -- Stored state, however spelled (escapes included), is not served for a cut body.
    if self.nostate and (#raw > KEY_MAX or raw:find("\\", 1, true) or STATEFUL[fold_key(raw)]) then
        spoil(msg, sc, at)
    end
    if name then
        sc.seen[name] = true
    end
    -- A member that costs more than its tokens, which the key may not ask for: its
    -- value is judged (value_end), unless spelled so that only some readers take it, or
    -- twice.
    local folded = #raw <= KEY_MAX and fold_key(raw)
    local letter = folded and COSTLY[folded]
    if letter and self.costly:find(letter, 1, true) then
        if folded ~= raw or sc.seen[folded] then
            spoil(msg, sc, at)
        end
        sc.seen[folded] = true
        name = folded
    end
    sc.tools = folded == "tools" and self.costly ~= ""
    sc.member, sc.key = name, nil
    sc.phase = "colon"
end

-- A string of the "tools" member's value ended: its elements' "type" says whether the
-- provider runs the tool (spoa/reqbody.c's reqbody_tool, past the cut).
function Capture:tool_string(msg, sc, text, at)
    if sc.depth == 2 then
        -- An element that is no object: nobody can judge it.
        if self.costly:find("o", 1, true) then
            spoil(msg, sc, at)
        end
    elseif sc.depth == 3 and sc.ttype then
        local letter = tool_letter(text)
        if letter and self.costly:find(letter, 1, true) then
            spoil(msg, sc, at)
        end
        sc.ttype = nil
    elseif sc.depth == 3 then
        sc.tkey = text
    end
end

-- A ':' or the end of a member inside an element of "tools": after a key that is or
-- could be "type", its value must be a plain string the next tool_string judges.
function Capture:tool_mark(msg, sc, c, at)
    if c == 58 and sc.tkey then
        local key = sc.tkey
        sc.tkey = nil
        if key == "type" then
            sc.ttype = true
            return
        end
        if (key:find("\\", 1, true) or fold_key(key) == "type") and self.costly:find("o", 1, true) then
            spoil(msg, sc, at)
        end
        return
    end
    -- A type that was no string (a list, an object, a number).
    if sc.ttype and self.costly:find("o", 1, true) then
        spoil(msg, sc, at)
    end
    sc.ttype, sc.tkey = nil, nil
end

-- More text of the value of a judged member; one too long to be a plain value spoils
-- the body (its first byte is held back, see scan_request).
function Capture:value_more(msg, sc, text)
    if sc.vlong then
        return
    end
    if sc.value == "" then
        -- Bytes before the value that some reader skips are counted, not kept: the cap
        -- is the value's, and a spoil lands on its first byte (cJSON skips every byte
        -- up to the space as whitespace, a NUL included).
        local lead = #text:match("^[\0-\32]*")
        sc.vws = sc.vws + lead
        text = text:sub(lead + 1)
    end
    if #sc.value + #text > OPTIONS_MAX then
        sc.vlong = true
        spoil(msg, sc, sc.vat + sc.vws)
        return
    end
    sc.value = sc.value .. text
end

-- A judged member's value ended at offset vend. A stream_options that does not ask for
-- usage is rewritten in place when the body is known to be a stream, or the value is an
-- object (which only a stream may carry). Returns how many bytes the body grew.
function Capture:value_end(msg, sc, text, vend)
    self:value_more(msg, sc, text)
    local value = not sc.vlong and sc.value:match("^%s*(.-)%s*$")
    local grow = 0
    if value and sc.member == "model" and self.allow then
        -- A plain JSON string naming an allowed model, as sent; anything else is
        -- refused (an escape included).
        local name = value:match('^"([^"\\]*)"$')
        if not (name and self.allow[name]) then
            spoil(msg, sc, sc.vat + sc.vws)
        end
    elseif value and COSTLY[sc.member] then
        -- null, or modalities without audio (as spoa/reqbody.c judges a whole body).
        if value ~= "null" and not (sc.member == "modalities" and plain_list(value)
                                    and not value:find('"audio"', 1, true)) then
            spoil(msg, sc, sc.vat + sc.vws)
        end
    elseif value and sc.member == "service_tier" and self.tiers then
        -- null, or a plain tier name the key may ask for and the model prices.
        local tier = value:match('^"([a-z0-9_%-]*)"$')
        if value ~= "null" and not (tier and self.tiers[tier]) then
            spoil(msg, sc, sc.vat + sc.vws)
        end
    elseif value and sc.member == "stream" then
        sc.stream = value
    elseif value and sc.member == "stream_options" and not sc.spoiled and self.text ~= "" then
        sc.asked = asks_usage(value)
        if not sc.asked and (sc.stream == "true" or value:sub(1, 1) == "{") then
            local opts = self.text:match("(%b{})$")
            if msg:set(opts, sc.vat, vend - sc.vat) >= 0 then
                grow = #opts - (vend - sc.vat)
                sc.delta = sc.delta + grow
                sc.rewritten = true
            else
                spoil(msg, sc, sc.vat + sc.vws)
            end
        end
    end
    sc.member, sc.value, sc.vlong, sc.vat, sc.vws = nil, nil, nil, nil, nil
    return grow
end

-- Reads data (the input's bytes from offset base) through the top-level object: JSON
-- strings are skipped with plain string.find (memchr), so the cost is per quote and
-- escape, not per byte. Returns the input offset of the object's closing brace once it is seen.
function Capture:scan_data(msg, data, base)
    local sc = self.scan
    local find, sub, byte = string.find, string.sub, string.byte
    local i, n = 1, #data
    local vfrom = sc.value and 1
    -- Input offset of data[j]: base + j - 1 + shift (rewrites move what follows).
    local shift = 0
    local nq, nb = 0, 0
    local kfrom = sc.key and 1
    local tfrom = sc.tstr and 1
    while i <= n do
        if sc.instr then
            if sc.esc then
                -- The byte after a backslash that ended the previous read.
                sc.esc = false
                i = i + 1
            else
                -- Plain finds (memchr) of the next quote and backslash, each remembered
                -- until passed: a pattern costs ~10 ns a byte, prompts are long strings.
                if nq < i then
                    nq = find(data, '"', i, true) or n + 1
                end
                if nb < i then
                    nb = find(data, "\\", i, true) or n + 1
                end
                local q = nq < nb and nq or nb
                if q > n then
                    break
                end
                if byte(data, q) == 92 then
                    if q == n then
                        sc.esc = true
                        break
                    end
                    i = q + 2
                else
                    sc.instr = false
                    i = q + 1
                    if kfrom then
                        self:key_end(msg, sc, sc.key .. sub(data, kfrom, q - 1),
                            base + q - 1 + shift)
                        kfrom = nil
                    elseif tfrom then
                        -- Only a type's length matters past TYPE_MAX: no long copies.
                        local last = q - 1 < tfrom + TYPE_MAX and q - 1 or tfrom + TYPE_MAX
                        self:tool_string(msg, sc, sc.tstr .. sub(data, tfrom, last),
                            base + q - 1 + shift)
                        sc.tstr, tfrom = nil, nil
                    end
                end
            end
        else
            local q = find(data, '["{}%[%],:]', i)
            if not q then
                break
            end
            local c = byte(data, q)
            i = q + 1
            if c == 34 then
                sc.instr = true
                if sc.depth == 1 and sc.phase == "key" then
                    sc.key, kfrom = "", q + 1
                elseif sc.tools and (sc.depth == 2 or sc.depth == 3) then
                    sc.tstr, tfrom = "", q + 1
                end
            elseif sc.tools and sc.depth == 3 and (c == 58 or c == 44 or c == 125) then
                self:tool_mark(msg, sc, c, base + q - 1 + shift)
                if c == 125 then
                    sc.depth = 2
                end
            elseif c == 123 or c == 91 then
                if sc.tools and sc.depth == 3 and sc.ttype then
                    self:tool_mark(msg, sc, c, base + q - 1 + shift)
                end
                sc.depth = sc.depth + 1
            elseif c == 125 or c == 93 then
                sc.depth = sc.depth - 1
                if sc.depth == 0 then
                    if vfrom then
                        shift = shift + self:value_end(msg, sc, sub(data, vfrom, q - 1),
                            base + q - 1 + shift)
                    end
                    return base + q - 1 + shift
                end
            elseif sc.depth == 1 and c == 58 and sc.phase == "colon" then
                sc.phase = "value"
                if sc.member then
                    sc.value, sc.vat, sc.vws, vfrom = "", base + q + shift, 0, q + 1
                end
            elseif sc.depth == 1 and c == 44 then
                if vfrom then
                    shift = shift + self:value_end(msg, sc, sub(data, vfrom, q - 1),
                        base + q - 1 + shift)
                    vfrom = nil
                end
                sc.member = nil
                sc.phase = "key"
            end
        end
    end
    if kfrom then
        sc.key = sc.key .. sub(data, kfrom, kfrom + KEY_MAX)
    end
    if tfrom then
        sc.tstr = sc.tstr .. sub(data, tfrom, tfrom + TYPE_MAX)
    end
    if vfrom then
        self:value_more(msg, sc, sub(data, vfrom))
    end
    return nil
end

-- The request body of a cut request (any API), scanned as it passes. Held back: the last
-- byte until the closing brace (or the message's end) is seen, so that the filter is
-- called again at the end; and a judged member's value until it ends, so that it can
-- still be rewritten or spoiled.
function Capture:scan_request(msg)
    local sc = self.scan
    local avail = msg:input()
    if sc.done then
        return avail
    end
    local close = sc.close
    if not close and avail > sc.held then
        close = self:scan_data(msg, msg:body(sc.held, avail - sc.held) or "", sc.held)
        avail = msg:input()
    end
    if close then
        -- A restricted key's body that named no model leaves the upstream to pick one.
        if self.allow and not sc.seen.model then
            spoil(msg, sc, close)
        end
        local text = sc.text or self:closing(sc)
        if text ~= "" and msg:insert(text, close) < 0 then
            -- No room in the buffer: send what precedes the brace and retry.
            sc.close, sc.text, sc.held = 0, text, avail - close
            return close
        end
        sc.done = true
        return msg:input()
    end
    if msg:eom() then
        -- The body never closed (invalid JSON): the announced length still holds.
        if #self.text - sc.delta > 0 then
            msg:append(string.rep(" ", #self.text - sc.delta))
        end
        sc.done = true
        return msg:input()
    end
    local fwd = avail - 1
    if sc.vat and sc.vat < fwd then
        fwd = sc.vat
    end
    if fwd < 0 then
        fwd = 0
    end
    sc.held = avail - fwd
    if sc.vat then
        sc.vat = sc.vat - fwd
    end
    return fwd
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

-- A body whose size was not announced (chunked) is spoiled once it passes the cap
-- (haproxy.cfg, TALLY_MAX_BODY, refuses announced ones), so that the upstream refuses
-- it, and the rest passes unread (removing it stalled the message's end: tested on
-- 2.6); txn.tally.too_large (a: an Anthropic path, o: another) has haproxy.cfg answer
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
    if not msg:is_resp() then
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
        local chunk = self.searches and (msg:body(self.held, new) or "")
        self:keep(txn, msg, self.held, new)
        if chunk then
            self:count_searches(txn, chunk)
        end
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
        self:publish(txn)
    end
end

core.register_filter("tally-capture", Capture, function(flt, args)
    return flt
end)

-- A pause before the agent is asked again about a stored response's id that the key
-- may have just made (haproxy.cfg, txn.tally.wait): msleep yields, so the thread serves
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
