-- What every script begins with (scripts.rs puts it first).
--
-- `now`: the time in microseconds since the store's epoch (2023-11-14,
-- Unix time 1,700,000,000: small enough that a double keeps a fraction of
-- a microsecond for decades), from Redis's TIME, so that the processes'
-- clocks do not matter; or ARGV[1] when the caller pins it (tests only).
-- `text`: a number as a string that reads back to the same double (Redis
-- would turn a Lua number into an integer).
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local time = redis.call('TIME')
  now = (tonumber(time[1]) - 1700000000) * 1000000 + tonumber(time[2])
end
local function text(x) return string.format('%.17g', x) end

-- What a script reads from its key may be anything another client wrote
-- there, so nothing is used unchecked. `fields(...)`: HMGET of KEYS[1];
-- a key that is not a hash reads as empty. `number(state, i, names,
-- above)`: field i as a number if it is one, finite and above `above`;
-- else nil, and a field that was there but held no such number is
-- garbage. `forget_garbage()` deletes the garbage fields (or the key, if
-- it was no hash): the key then reads as missing what this script read
-- as missing. `repaired`: the script found something to mend, and says
-- so in its answer (a leading '!'), once, since it mends it.
local repaired = false
local garbage = {}
local not_hash = false

local function fields(...)
  local state = redis.pcall('HMGET', KEYS[1], ...)
  if state.err then
    not_hash, repaired = true, true
    return {}
  end
  return state
end

local function number(state, i, names, above)
  local value = state[i]
  if not value then return nil end
  local x = tonumber(value)
  -- NaN fails `x > above`, infinities one side or the other.
  if x and x > above and x < math.huge then return x end
  repaired = true
  table.insert(garbage, names[i])
  return nil
end

local function forget_garbage()
  if not_hash then
    redis.call('DEL', KEYS[1])
  elseif #garbage > 0 then
    redis.call('HDEL', KEYS[1], unpack(garbage))
  end
end
