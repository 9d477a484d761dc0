-- tally usage capture: keeps the first and last bytes of a response body and hands
-- them to the end-of-transaction log record (txn.tally.cap), where the agent reads the
-- usage the upstream reported. The body itself passes untouched, with one exception
-- below (the usage chunk the gateway asked for on the client's behalf).
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
-- Amendment: an OpenAI stream whose client did not ask for usage arrives with
-- txn.tally.amend, the body offset just past its opening brace. The request gets
-- stream_options.include_usage there, so that the upstream reports usage, and the
-- response loses the usage event again, so that the client sees the stream it asked
-- for (client code indexing choices[0] of every chunk would fail on it).

local HEAD = 1536
local TAIL = 3072
local INCLUDE_USAGE = '"stream_options":{"include_usage":true},'

local Capture = {}
Capture.id = "tally-capture"
Capture.flags = filter.FLT_CFG_FL_HTX
Capture.__index = Capture

function Capture:new()
    return setmetatable({ n = 0, head = "", tail = "", held = 0 }, Capture)
end

function Capture:start_analyze(txn, chn)
    if chn:is_resp() then
        filter.register_data_filter(self, chn)
        return
    end
    local at = txn:get_var("txn.tally.amend")
    if at then
        -- haproxy.cfg dropped Content-Length: the longer body goes out chunked
        -- (2.6 has no HTTPMessage.set_body_len).
        self.insert_at = at
        self.amend = true
        filter.register_data_filter(self, chn)
    end
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

-- Removes the usage event from an amended stream. Returns how many bytes may go to
-- the client: an event is held back until it is whole, so that a usage event split
-- across reads is still recognised.
function Capture:strip(msg, avail)
    local data = msg:body(0, avail) or ""
    local u = data:find('"usage":{', 1, true)
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
        if stop then
            msg:remove(start - 1, stop + gap - start)
            self.amend = nil
            return avail - (stop + gap - start)
        end
        return start - 1
    end
    local last = 0
    for e in data:gmatch("\n\r?\n()") do
        last = e - 1
    end
    return last
end

function Capture:http_payload(txn, msg)
    local avail = msg:input()
    if not msg:is_resp() then
        if self.insert_at and avail >= self.insert_at then
            msg:insert(INCLUDE_USAGE, self.insert_at)
            self.insert_at = nil
        end
        return
    end
    local new = avail - self.held
    if new > 0 then
        self:keep(txn, msg, self.held, new)
    end
    if not self.amend then
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
