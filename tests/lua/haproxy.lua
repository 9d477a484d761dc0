-- A stand-in for the part of HAProxy's Lua API that haproxy/capture.lua and scanner.lua
-- use, so that a stock Lua (5.3 as Debian 12's HAProxy 2.6 embeds, 5.4 as 3.4 does) runs
-- the filter: tests/lua/test_capture.lua, test_scanner.lua and the differential fuzz
-- target (tests/fuzz/fuzz_capture_request.c) load it before the filter's files.
--
-- It defines the globals capture.lua meets (core, filter) and builds txn, channel and
-- HTTP message objects whose methods behave as HAProxy's src/hlua.c does (offsets
-- relative to the input, negative ones from its end, range errors raised, -1 when the
-- buffer has no room, nil for no data at the message's end). M.feed drives one message
-- through a filter the way HAProxy's payload callbacks do: the body arrives in chunks,
-- each http_payload call forwards what it returns (nil: everything) and holds back the
-- rest, which it meets again with the next chunk. Requests and responses alike. Data
-- fills the buffer to its end, the worst case (HAProxy keeps tune.maxrewrite free while
-- analysers may rewrite), so that a filter's answer to a full buffer is exercised.
local M = {}

-- What capture.lua registered: filter classes and actions, by name.
M.filters, M.actions = {}, {}
-- The channels each filter instance asked to see data of (filter.register_data_filter).
M.registered = setmetatable({}, { __mode = "k" })
M.slept = 0

core = {
    register_filter = function(name, class, fn)
        M.filters[name] = fn(class, {}) or class
    end,
    register_action = function(name, kinds, fn)
        M.actions[name] = fn
    end,
    msleep = function(ms)
        M.slept = M.slept + ms
    end,
}

filter = {
    FLT_CFG_FL_HTX = 1,
    register_data_filter = function(flt, chn)
        M.registered[flt] = M.registered[flt] or {}
        M.registered[flt][chn] = true
    end,
}

-- luaL_checkinteger: HAProxy raises an error for a non-integer argument.
local function int(v, what)
    if math.type(v) ~= "integer" then
        if math.type(v) == "float" and v == math.floor(v) then
            return math.tointeger(v)
        end
        error(what .. ": integer expected, got " .. tostring(v), 3)
    end
    return v
end

local Txn = {}
Txn.__index = Txn

-- A transaction: vars maps full names ("txn.tally.amend_text") to values; headers maps
-- lower-case response header names to their value (txn.f:res_hdr).
function M.txn(vars, headers)
    local t = setmetatable({ vars = {}, headers = {} }, Txn)
    for k, v in pairs(vars or {}) do
        t.vars[k] = v
    end
    for k, v in pairs(headers or {}) do
        t.headers[k:lower()] = v
    end
    local fetches = {}
    function fetches.res_hdr(_, name)
        return t.headers[name:lower()]
    end
    -- HAProxy's unique id (%ID); the stand-in's is fixed.
    function fetches.unique_id()
        return "test-unique-id"
    end
    -- The request's headers (t.req_headers: lower-case names; by default a body with a
    -- Content-Length) and path (t.path).
    t.req_headers = { ["content-length"] = "0" }
    function fetches.req_hdr(_, name)
        return t.req_headers[name:lower()]
    end
    function fetches.path()
        return t.path or "/v1/chat/completions"
    end
    t.f = fetches
    return t
end

function Txn:get_var(name)
    return self.vars[name]
end

function Txn:set_var(name, value)
    self.vars[name] = value
end

function Txn:unset_var(name)
    self.vars[name] = nil
end

local Channel = {}
Channel.__index = Channel

function Channel:is_resp()
    return self.resp
end

-- An HTTP message as a payload callback sees it: buf is the input (bytes this filter
-- has not forwarded yet; what it forwarded has left), bufsize the buffer's room.
local Msg = {}
Msg.__index = Msg

function M.message(resp, bufsize)
    return setmetatable({ buf = "", ended = false, resp = resp, bufsize = bufsize,
                          chn = setmetatable({ resp = resp }, Channel) }, Msg)
end

function Msg:free()
    return self.bufsize - #self.buf
end

function Msg:input()
    return #self.buf
end

function Msg:eom()
    return self.ended
end

function Msg:is_resp()
    return self.resp
end

function Msg:channel()
    return self.chn
end

-- An offset as hlua.c takes it: default the input's start, negative from its end
-- (clamped at 0), past the input an error.
local function offset_of(self, offset, what)
    if offset == nil then
        return 0
    end
    offset = int(offset, what)
    if offset < 0 then
        offset = math.max(0, #self.buf + offset)
    end
    if offset > #self.buf then
        error(what .. ": offset out of range.", 3)
    end
    return offset
end

-- A length of set/remove: default to the input's end, -1 the same, 0 nothing, past the
-- input an error.
local function length_of(self, off, len, what)
    if len == nil then
        return #self.buf - off
    end
    len = int(len, what)
    if len == -1 then
        return #self.buf - off
    end
    if len < 0 or off + len > #self.buf then
        error(what .. ": length out of range.", 3)
    end
    return len
end

function Msg:body(offset, len)
    local off = offset_of(self, offset, "body")
    local n = #self.buf - off
    if len ~= nil then
        len = int(len, "body")
        if len == -1 then
            n = self.bufsize
        elseif len < 0 then
            error("body: length out of range.", 2)
        else
            n = len
        end
    end
    local s = self.buf:sub(off + 1, off + n)
    -- _hlua_http_msg_dup: nothing copied at the message's end is nil.
    if s == "" and self.ended then
        return nil
    end
    return s
end

-- _hlua_http_msg_insert: an empty string is 0, no room -1.
local function put(self, s, off)
    if #s == 0 then
        return 0
    end
    if #s > self:free() then
        return -1
    end
    self.buf = self.buf:sub(1, off) .. s .. self.buf:sub(off + 1)
    return #s
end

function Msg:set(s, offset, len)
    local off = offset_of(self, offset, "set")
    local n = length_of(self, off, len, "set")
    if #s > self:free() + n then
        return -1
    end
    self.buf = self.buf:sub(1, off) .. self.buf:sub(off + n + 1)
    return put(self, s, off)
end

function Msg:insert(s, offset)
    return put(self, s, offset_of(self, offset, "insert"))
end

function Msg:append(s)
    return put(self, s, #self.buf)
end

function Msg:remove(offset, len)
    local off = offset_of(self, offset, "remove")
    local n = length_of(self, off, len, "remove")
    self.buf = self.buf:sub(1, off) .. self.buf:sub(off + n + 1)
    return n
end

-- The body cut at the given offsets (ascending, within the body): its chunks.
function M.chunks(body, splits)
    local out, from = {}, 1
    for _, at in ipairs(splits or {}) do
        if at >= from and at < #body then
            out[#out + 1] = body:sub(from, at)
            from = at + 1
        end
    end
    out[#out + 1] = body:sub(from)
    return out
end

-- Runs one message through a new instance of the filter class, or through opts.filter
-- (the instance that saw the request, as HAProxy's one instance per stream sees both):
-- opts.resp (a response), opts.splits (the offsets its body arrives cut at),
-- opts.bufsize (the buffer's room: data waits while it is full). Returns what left the
-- filter, in order, and the filter instance. Raises an error when the filter stalls: it
-- holds bytes back while no more can arrive (the message ended, or the buffer is full),
-- which HAProxy would answer only with a timeout.
function M.feed(class, txn, body, opts)
    opts = opts or {}
    local flt = opts.filter or class:new()
    local msg = M.message(opts.resp or false, opts.bufsize or 1048576)
    if flt.start_analyze then
        flt:start_analyze(txn, msg.chn)
    end
    local out = {}
    if not (M.registered[flt] and M.registered[flt][msg.chn]) then
        out[1] = body
    else
        local pending = M.chunks(body, opts.splits)
        local next_chunk, idle = 1, 0
        while true do
            local arrived = 0
            while next_chunk <= #pending and msg:free() > 0 do
                local chunk = pending[next_chunk]
                local take = math.min(#chunk, msg:free())
                msg.buf = msg.buf .. chunk:sub(1, take)
                arrived = arrived + take
                if take == #chunk then
                    next_chunk = next_chunk + 1
                    break
                end
                pending[next_chunk] = chunk:sub(take + 1)
            end
            msg.ended = next_chunk > #pending
            local fwd = flt:http_payload(txn, msg)
            local n = #msg.buf
            if fwd ~= nil then
                fwd = int(fwd, "http_payload's return")
                if fwd < 0 then
                    error("http_payload returned " .. fwd)
                end
                n = math.min(n, fwd)
            end
            out[#out + 1] = msg.buf:sub(1, n)
            msg.buf = msg.buf:sub(n + 1)
            if msg.ended and #msg.buf == 0 then
                break
            end
            idle = (arrived == 0 and n == 0) and idle + 1 or 0
            if idle >= 2 then
                error(string.format("filter stalled: %d bytes held, %s", #msg.buf,
                    msg.ended and "message ended" or "buffer full"))
            end
        end
    end
    if flt.end_analyze then
        flt:end_analyze(txn, msg.chn)
    end
    return table.concat(out), flt
end

-- Loads the request scanner from dir (haproxy/) alone and returns its methods.
function M.load_scanner(dir)
    dofile(dir .. "/scanner.lua")
    return TallyScanner
end

-- Loads the capture filter's files from dir (haproxy/) as tally.cfg's lua-load-per-thread
-- lines do, in one state and in their order, and returns its filter class.
function M.load_capture(dir)
    M.load_scanner(dir)
    dofile(dir .. "/capture.lua")
    return M.filters["tally-capture"]
end

return M
