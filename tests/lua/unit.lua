-- What tests/lua/test_*.lua share: a named test list and its runner, a comparison that
-- shows NUL bytes, and a request body sent through a filter at every split point.
local H = require("haproxy")

local M = {}

local tests, order = {}, {}

function M.test(name, fn)
    tests[name] = fn
    order[#order + 1] = name
end

function M.show(s)
    return (s:gsub("%z", "<NUL>"))
end

function M.eq(got, want, what)
    if got ~= want then
        error(string.format("%s:\n  got  %q\n  want %q", what or "value",
            M.show(tostring(got)), M.show(tostring(want))), 2)
    end
end

-- The body sent through a filter of class as HAProxy would at every split point (one
-- chunk boundary at each offset), byte by byte, and in one piece: check(out, txn) holds
-- for each, and every way gives the same bytes.
function M.every_split(class, body, txnvars, check, opts)
    opts = opts or {}
    local first
    local function one(splits)
        local txn = H.txn(txnvars)
        local out = H.feed(class, txn, body, { splits = splits, bufsize = opts.bufsize })
        local ok, err = pcall(check, out, txn)
        if not ok then
            error(string.format("split %s: %s", table.concat(splits, ","), err), 0)
        end
        if first and out ~= first then
            error(string.format("split %s gives %q, unsplit %q", table.concat(splits, ","),
                M.show(out), M.show(first)), 0)
        end
        first = first or out
    end
    one({})
    for k = 1, #body - 1 do
        one({ k })
    end
    local bytes = {}
    for k = 1, #body - 1 do
        bytes[k] = k
    end
    one(bytes)
    return first
end

-- Runs the tests named in names (all when none), prints each outcome and a count, and
-- exits 1 if one failed.
function M.run(names)
    local want = {}
    for i = 1, #names do
        want[names[i]] = true
    end
    local failed, ran = 0, 0
    for _, name in ipairs(order) do
        if next(want) == nil or want[name] then
            ran = ran + 1
            local ok, err = pcall(tests[name])
            if ok then
                print("ok   " .. name)
            else
                failed = failed + 1
                print("FAIL " .. name .. "\n     " .. tostring(err):gsub("\n", "\n     "))
            end
        end
    end
    print(string.format("%s: %d tests, %d failed", _VERSION, ran, failed))
    os.exit(failed == 0 and 0 or 1)
end

return M
