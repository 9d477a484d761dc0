-- tally request scanner: reads the top level of a request body that passes the agent's
-- cut (txn.tally.amend_scan) as it goes upstream, and holds what it sees to the rules
-- spoa/reqbody.c applies to a whole body: judged members named twice or spelled so that
-- only some JSON readers take them, costly members and tools, the allow-list, tiers and
-- stateful members spoil the body (a NUL before its end); a stream_options that does
-- not ask for usage is rewritten, and the amendment goes before the closing brace
-- (capture.lua's opening comment says why). Its cost is per quote, escape and bracket.
--
-- Runs in each HAProxy thread, inside the capture filter's request callbacks. Loaded with
-- lua-load-per-thread before capture.lua (tally.cfg): every file a lua-load-per-thread
-- line names runs in the same Lua state of each thread, in order, on 2.6 as on 3.4, so
-- the global TallyScanner this file defines is there when capture.lua takes its methods
-- as the filter's own (a require would need this directory on package.path). The filter
-- fields they use: text (the amendment, "" for none), scan, allow, nostate, costly and
-- tiers (scan_start sets these four), amend (set once the amendment goes in).

-- A stream_options value longer than this is no plain {"include_usage": true}.
local OPTIONS_MAX = 256
-- A key longer than this cannot spell a judged member, escapes and all (6 bytes each).
local KEY_MAX = 96
-- A tool's type longer than this is none a provider names.
local TYPE_MAX = 64
-- The members and tool types that decide a request's fate, as spoa/reqbody.c judges a
-- whole body (what each list means: spoa/reqrules.c). COSTLY's letters are those of
-- txn.tally.costly (spoa/decision.c): 'o' tools the provider runs, 'a' audio output; a
-- tool type starting with WEB_SEARCH_PREFIX is 'w'. STATEFUL members of a cut Responses
-- body are refused (txn.tally.nostate).
-- BEGIN reqrules: generated from spoa/reqrules.c by `make lua-rules`
local JUDGED = {
    ["model"] = true,
    ["stream"] = true,
    ["stream_options"] = true,
    ["service_tier"] = true,
}
local COSTLY = {
    ["web_search_options"] = "o",
    ["mcp_servers"] = "o",
    ["audio"] = "a",
    ["modalities"] = "a",
}
local CLIENT_TOOLS = {
    ["function"] = true,
    ["custom"] = true,
    ["local_shell"] = true,
    ["shell"] = true,
    ["apply_patch"] = true,
    ["computer_use_preview"] = true,
    ["namespace"] = true,
}
local CLIENT_TOOL_PREFIXES = { "bash_", "text_editor_", "computer_", "memory_", }
local WEB_SEARCH_PREFIX = "web_search"
local STATEFUL = {
    ["previous_response_id"] = true,
    ["conversation"] = true,
    ["background"] = true,
    ["request_id"] = true,
}
-- END reqrules

-- As upvalues: a global's field costs two table lookups per use.
local find, sub, byte = string.find, string.sub, string.byte

TallyScanner = {}
local Scanner = TallyScanner

-- The models a restricted key (or one with budgets per model) may have past the cut
-- (txn.tally.allow, a name a line), or nil when the agent judged the model itself.
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

-- Before the first byte: the scan's state and what the agent decided the key may have
-- past the cut (its transaction variables).
function Scanner:scan_start(txn)
    self.scan = { depth = 0, phase = "key", seen = {}, held = 0, delta = 0, passed = 0 }
    self.allow = allow_set(txn:get_var("txn.tally.allow"))
    self.nostate = txn:get_var("txn.tally.nostate") ~= nil
    self.costly = txn:get_var("txn.tally.costly") or ""
    self.tiers = allow_set(txn:get_var("txn.tally.tiers"))
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
    if t:sub(1, #WEB_SEARCH_PREFIX) == WEB_SEARCH_PREFIX then
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
-- rewritten as it passed), else spaces, so that the length is what tally.cfg
-- announced.
function Scanner:closing(sc)
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
-- reader refuses. why is the verdict the agent gives such a whole body (its first one
-- is kept), which HAProxy then answers and records (txn.tally.spoiled, tally.cfg).
local function spoil(msg, sc, at, why)
    msg:set("\0", at, 1)
    sc.spoiled = sc.spoiled or why
end

-- A top-level key ended at offset at: a judged member named twice, or one that only
-- some readers take for it, spoils the body there.
function Scanner:key_end(msg, sc, raw, at)
    local name, variant = nil, false
    if #raw <= KEY_MAX then
        name, variant = judged_key(raw)
    end
    -- Stored state, however spelled (escapes included), is not served for a cut body.
    if self.nostate and (#raw > KEY_MAX or raw:find("\\", 1, true) or STATEFUL[fold_key(raw)]) then
        spoil(msg, sc, at, "unsupported_parameter")
    end
    if variant or (name and sc.seen[name]) then
        spoil(msg, sc, at, "invalid_body")
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
            spoil(msg, sc, at, "unsupported_value")
        end
        sc.seen[folded] = true
        name = folded
    end
    sc.tools = folded == "tools" and self.costly ~= ""
    -- "tools" twice, or spelled so that only some readers take it: a tool nobody can
    -- judge (spoa/reqbody.c), whatever its elements.
    if sc.tools and self.costly:find("o", 1, true) then
        if folded ~= raw or sc.seen.tools then
            spoil(msg, sc, at, "unsupported_value")
        end
        sc.seen.tools = true
    end
    sc.member, sc.key = name, nil
    sc.phase = "colon"
end

-- A string of the "tools" member's value ended: its elements' "type" says whether the
-- provider runs the tool (spoa/reqbody.c's reqbody_tool, past the cut).
function Scanner:tool_string(msg, sc, text, at)
    if sc.depth == 2 then
        -- An element that is no object: nobody can judge it.
        if self.costly:find("o", 1, true) then
            spoil(msg, sc, at, "unsupported_value")
        end
    elseif sc.depth == 3 and sc.ttype then
        local letter = tool_letter(text)
        if letter and self.costly:find(letter, 1, true) then
            spoil(msg, sc, at, "unsupported_value")
        end
        sc.ttype = nil
    elseif sc.depth == 3 then
        sc.tkey = text
    end
end

-- From data[from] on (offset of data[j]: off + j - 1), the first byte of the "tools"
-- value, once it comes: an array or null; anything else is a tool nobody can judge
-- (spoa/reqbody.c), which a key that may not have the provider run tools is refused.
function Scanner:tools_first(msg, sc, data, from, off)
    local p = string.find(data, "[^\0-\32]", from)
    if p then
        local c = string.byte(data, p)
        if c ~= 91 and c ~= 110 then
            spoil(msg, sc, off + p - 1, "unsupported_value")
        end
        sc.tfirst = nil
    end
end

-- A ':' or the end of a member inside an element of "tools": after a key that is or
-- could be "type", its value must be a plain string the next tool_string judges.
function Scanner:tool_mark(msg, sc, c, at)
    if c == 58 and sc.tkey then
        local key = sc.tkey
        sc.tkey = nil
        if key == "type" then
            sc.ttype = true
            return
        end
        if (key:find("\\", 1, true) or fold_key(key) == "type") and self.costly:find("o", 1, true) then
            spoil(msg, sc, at, "unsupported_value")
        end
        return
    end
    -- A type that was no string (a list, an object, a number).
    if sc.ttype and self.costly:find("o", 1, true) then
        spoil(msg, sc, at, "unsupported_value")
    end
    sc.ttype, sc.tkey = nil, nil
end

-- The verdict on a judged member's value too long to be a plain one.
function Scanner:long_verdict(member)
    if member == "model" and self.allow then
        return "model_not_allowed"
    elseif COSTLY[member] or member == "service_tier" then
        return "unsupported_value"
    end
    return "invalid_body"
end

-- More text of the value of a judged member; one too long to be a plain value spoils
-- the body (its first byte is held back, see scan_request).
function Scanner:value_more(msg, sc, text)
    if sc.vlong then
        return
    end
    if sc.value == "" then
        -- Bytes before the value that some reader skips are counted, not kept: the cap
        -- is the value's, and a spoil lands on its first byte (cJSON skips every byte
        -- up to the space as whitespace, a NUL included). More of them than a value
        -- may hold go on: held, white space longer than the buffer would stall it.
        local lead = #text:match("^[\0-\32]*")
        sc.vws = sc.vws + lead
        if sc.vws > OPTIONS_MAX then
            sc.vat, sc.vws = sc.vat + sc.vws, 0
        end
        text = text:sub(lead + 1)
    end
    if #sc.value + #text > OPTIONS_MAX then
        -- Spoiled: nothing of the value needs holding any more (a value longer than
        -- the buffer would never end while held).
        sc.vlong = true
        spoil(msg, sc, sc.vat + sc.vws, self:long_verdict(sc.member))
        sc.vat = nil
        return
    end
    sc.value = sc.value .. text
end

-- A judged member's value ended at offset vend. A stream_options that does not ask for
-- usage is rewritten in place when the body is known to be a stream, or the value is an
-- object (which only a stream may carry). Returns how many bytes the body grew.
function Scanner:value_end(msg, sc, text, vend)
    self:value_more(msg, sc, text)
    local value = not sc.vlong and sc.value:match("^%s*(.-)%s*$")
    local grow = 0
    if value and sc.member == "model" and self.allow then
        -- A plain JSON string naming an allowed model, as sent; anything else is
        -- refused (an escape included).
        local name = value:match('^"([^"\\]*)"$')
        if not (name and self.allow[name]) then
            spoil(msg, sc, sc.vat + sc.vws, "model_not_allowed")
        end
    elseif value and COSTLY[sc.member] then
        -- null, or modalities without audio (as spoa/reqbody.c judges a whole body).
        if value ~= "null" and not (sc.member == "modalities" and plain_list(value)
                                    and not value:find('"audio"', 1, true)) then
            spoil(msg, sc, sc.vat + sc.vws, "unsupported_value")
        end
    elseif value and sc.member == "service_tier" and self.tiers then
        -- null, or a plain tier name the key may ask for and the model prices.
        local tier = value:match('^"([a-z0-9_%-]*)"$')
        if value ~= "null" and not (tier and self.tiers[tier]) then
            spoil(msg, sc, sc.vat + sc.vws, "unsupported_value")
        end
    elseif value and sc.member == "stream" then
        sc.stream = value
    elseif value and sc.member == "stream_options" and not sc.spoiled and self.text ~= "" then
        sc.asked = asks_usage(value)
        -- Before "stream" is known, only null (which a body that is no stream may carry)
        -- waits for the closing brace to be judged.
        sc.options = not sc.asked and value == "null" and sc.stream == nil
        if not sc.asked and (sc.stream == "true" or value ~= "null") then
            local opts = self.text:match("(%b{})$")
            if msg:set(opts, sc.vat, vend - sc.vat) >= 0 then
                grow = #opts - (vend - sc.vat)
                sc.delta = sc.delta + grow
                sc.rewritten = true
            else
                spoil(msg, sc, sc.vat + sc.vws, "invalid_body")
            end
        end
    end
    sc.member, sc.value, sc.vlong, sc.vat, sc.vws = nil, nil, nil, nil, nil
    return grow
end

-- Reads data (the input's bytes from offset base) through the top-level object: JSON
-- strings are skipped with plain string.find (memchr), so the cost is per quote and
-- escape, not per byte. Returns the input offset of the object's closing brace once it is seen.
function Scanner:scan_data(msg, data, base)
    local sc = self.scan
    local i, n = 1, #data
    local vfrom = sc.value and 1
    -- Input offset of data[j]: base + j - 1 + shift (rewrites move what follows).
    local shift = 0
    local nq, nb = 0, 0
    local kfrom = sc.key and 1
    local tfrom = sc.tstr and 1
    if sc.tfirst then
        self:tools_first(msg, sc, data, 1, base)
    end
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
                if sc.tools and self.costly:find("o", 1, true) then
                    sc.tfirst = true
                    self:tools_first(msg, sc, data, q + 1, base + shift)
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
function Scanner:scan_request(msg)
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
            spoil(msg, sc, close, "model_required")
        end
        -- A stream whose stream_options null went before "stream": a second
        -- stream_options would make two members readers choose between.
        if sc.options and sc.stream == "true" then
            spoil(msg, sc, close, "invalid_body")
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
        local pad = #self.text - sc.delta
        if pad > 0 and msg:append(string.rep(" ", pad)) < 0 then
            -- No room in the buffer: send all but the last byte and retry.
            sc.held = 1
            return avail - 1
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
