-- What both scripts begin with (src/store/scripts.rs puts it first).
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
