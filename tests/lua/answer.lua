-- Reads an answer through haproxy/capture.lua outside HAProxy, with the stand-in of
-- tests/lua/haproxy.lua: the entry point of tests/unit/luacap.c, which the C unit tests
-- and the answer-reader fuzz target use.
local H = dofile(TALLY_ROOT .. "/tests/lua/haproxy.lua")
local Capture = H.load_capture(TALLY_ROOT .. "/haproxy")

-- body in reads of split bytes (0: one), content type ct; count_ws: the agent asked
-- for web searches to be counted. Returns txn.tally.cap and txn.tally.u_ws.
function tally_read_answer(body, split, ct, count_ws)
    local txn = H.txn({ ["txn.tally.count_searches"] = count_ws and 1 or nil },
                      { ["content-type"] = ct })
    local splits = {}
    if split > 0 then
        for at = split, #body - 1, split do
            splits[#splits + 1] = at
        end
    end
    H.feed(Capture, txn, body, { resp = true, splits = splits })
    return txn.vars["txn.tally.cap"], txn.vars["txn.tally.u_ws"]
end
