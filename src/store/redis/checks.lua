-- The checks of what a script reads, for outcome.lua and peek.lua (after
-- now.lua; scripts.rs puts them together). decide.lua, which runs for
-- every call, makes the same checks inline: a function is made anew at
-- each run of a script, and the decision is the one path where that
-- shows.
--
-- What a script reads from its key may be anything another client wrote
-- there (store/mod.rs, "What a store reads"), so nothing is used
-- unchecked. `fields(...)`: HMGET of KEYS[1]; a key that is not a hash
-- reads as empty (`not_hash`). `number(value, name, above)`: a field's
-- value as a number if it is one, finite and above `above`; else nil, and
-- a field that was there but held no such number is garbage (`garbage`,
-- made only then, lists its name). `forget_garbage()` deletes the garbage
-- fields, or the key if it was no hash: the key then reads as missing
-- what this script read as missing. `repaired`: the script found
-- something to mend, and says so in its answer (a leading '!'), once,
-- since it mends it.
local repaired, garbage, not_hash = false, nil, false

local function fields(...)
  local state = redis.pcall('HMGET', KEYS[1], ...)
  if state.err then
    not_hash, repaired = true, true
    return {}
  end
  return state
end

local function number(value, name, above)
  if not value then return nil end
  local x = tonumber(value)
  -- NaN fails `x > above`, infinities one side or the other.
  if x and x > above and x < math.huge then return x end
  repaired = true
  garbage = garbage or {}
  garbage[#garbage + 1] = name
  return nil
end

local function forget_garbage()
  if not_hash then
    redis.call('DEL', KEYS[1])
  elseif garbage then
    redis.call('HDEL', KEYS[1], unpack(garbage))
  end
end
