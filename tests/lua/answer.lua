-- Runs haproxy/capture.lua's response side outside HAProxy, as HAProxy drives it: a
-- stand-in for the few parts of its Lua API the filter uses on a response, and a body
-- handed to Capture:http_payload in chunks. Used by the C tests and the fuzz target
-- that hold the answer reader to cJSON (tests/unit/luacap.c).
local Capture
core = {
    register_filter = function(_, class) Capture = class end,
    register_action = function() end,
    msleep = function() end,
}
filter = { FLT_CFG_FL_HTX = 1, register_data_filter = function() end }
dofile(TALLY_CAPTURE_LUA)

-- body in chunks of split bytes (0: one), content type ct; count_ws: the agent asked
-- for web searches to be counted. Returns txn.tally.cap and txn.tally.u_ws.
function tally_read_answer(body, split, ct, count_ws)
    local vars = { ["txn.tally.count_searches"] = count_ws and 1 or nil }
    local txn = {
        get_var = function(_, k) return vars[k] end,
        set_var = function(_, k, v) vars[k] = v end,
        unset_var = function(_, k) vars[k] = nil end,
        f = { res_hdr = function(_, name) return name == "content-type" and ct or nil end },
    }
    local chn = { is_resp = function() return true end }
    local f = Capture:new()
    f:start_analyze(txn, chn)
    local buf, pos, n = "", 1, #body
    if split <= 0 then
        split = n
    end
    local msg = {
        is_resp = function() return true end,
        eom = function() return pos > n end,
        input = function() return #buf end,
        body = function(_, off, len)
            if off < 0 then
                return buf:sub(off)
            end
            return buf:sub(off + 1, off + len)
        end,
        remove = function(_, off, len) buf = buf:sub(1, off) .. buf:sub(off + len + 1) end,
    }
    while pos <= n do
        buf = buf .. body:sub(pos, pos + split - 1)
        pos = pos + split
        local fwd = f:http_payload(txn, msg) or #buf
        buf = buf:sub(fwd + 1)
    end
    f:end_analyze(txn, chn)
    return vars["txn.tally.cap"], vars["txn.tally.u_ws"]
end
