-- tally usage capture: keeps the first and last bytes of a response body and hands
-- them to the end-of-transaction log record (txn.tally.cap), where the agent reads the
-- usage the upstream reported. The body itself passes untouched.
--
-- Loaded with lua-load-per-thread (a shared lua-load crashes HAProxy 2.6.12 with
-- nbthread > 1). Declared only on the backends that need it: every callback costs
-- 15-25 us, so a response that does not need capture must not meet this filter.
--
-- Record field: "c1 <kind> <body bytes> <head len> <tail len> <head><tail>", kind j
-- (JSON), s (event stream) or o (other). Head is the first HEAD bytes, tail the last
-- TAIL bytes after the head: together the whole body when it is short enough.

local HEAD = 1536
local TAIL = 3072

local Capture = {}
Capture.id = "tally-capture"
Capture.flags = filter.FLT_CFG_FL_HTX
Capture.__index = Capture

function Capture:new()
    return setmetatable({ n = 0, kind = "o", head = "", tail = "" }, Capture)
end

function Capture:start_analyze(txn, chn)
    if chn:is_resp() then
        filter.register_data_filter(self, chn)
    end
end

function Capture:http_payload(txn, msg)
    local avail = msg:input()
    if avail <= 0 then
        return
    end
    if self.n == 0 then
        local ct = txn.f:res_hdr("content-type") or ""
        if ct:find("event-stream", 1, true) then
            self.kind = "s"
        elseif ct:find("json", 1, true) then
            self.kind = "j"
        end
    end
    self.n = self.n + avail
    local data
    if avail <= HEAD + TAIL then
        data = msg:body() or ""
    else
        -- A large chunk: copy only the parts kept.
        data = (msg:body(0, HEAD) or "") .. (msg:body(-TAIL) or "")
    end
    local need = HEAD - #self.head
    if need > 0 then
        self.head = self.head .. data:sub(1, need)
        data = data:sub(need + 1)
    end
    if need > 0 then
        -- A stream cut later (client or upstream gone) ends without end_analyze
        -- having run before the record: the head alone still names the model and,
        -- for Anthropic, the input usage.
        self:publish(txn)
    end
    if #data >= TAIL then
        self.tail = data:sub(-TAIL)
    elseif #data > 0 then
        self.tail = (self.tail .. data):sub(-TAIL)
    end
end

-- Called on the response's end, and also when it is cut (client or upstream gone):
-- a cut stream still reports what it carried.
function Capture:end_analyze(txn, chn)
    if chn:is_resp() and self.n > 0 then
        self:publish(txn)
    end
end

function Capture:publish(txn)
    -- Records travel one per line: control bytes become spaces (JSON needs none).
    local cap = (self.head .. self.tail):gsub("%c", " ")
    txn:set_var("txn.tally.cap", string.format("c1 %s %d %d %d %s", self.kind, self.n,
        #self.head, #self.tail, cap))
end

core.register_filter("tally-capture", Capture, function(flt, args)
    return flt
end)
