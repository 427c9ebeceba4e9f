-- One call's rate tokens from the shared bucket of KEYS[1]: the same GCRA
-- as the local rate cell (src/rate/gcra.rs), on Redis's clock.
--
-- Runs after now.lua (`now`, `text`). ARGV: [1] the pinned time, or '';
-- [2] the starting rate (calls a second) of a key Redis has no state for;
-- [3] the burst; [4] how long the caller waits at most, in microseconds
-- (-1: however long); [5] how long an idle key's state is kept, in
-- milliseconds; [6] the call's cost in tokens (at most the burst).
--
-- Returns {admitted (1 or 0), wait in microseconds, rate, tat after the
-- call or ''}; numbers that are not whole are sent as strings, since
-- Redis turns a Lua number into an integer. A refused call takes nothing.
local state = redis.call('HMGET', KEYS[1], 't', 'r')
local tat = tonumber(state[1]) or now
local rate = tonumber(state[2]) or tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local max_wait = tonumber(ARGV[4])
local interval = 1000000 / rate
local new_tat = math.max(tat, now) + interval * tonumber(ARGV[6])
local start = math.max(new_tat - interval * burst, now)
local wait = start - now
if max_wait >= 0 and wait > max_wait then
  return {0, text(wait), text(rate), ''}
end
local stored = text(new_tat)
if state[1] then
  redis.call('HSET', KEYS[1], 't', stored, 'r', text(rate))
else
  -- A new key: its use is measured from now (usage.rs `fresh`).
  redis.call('HSET', KEYS[1], 't', stored, 'r', text(rate), 'us', text(now), 'uc', 0)
end
redis.call('PEXPIRE', KEYS[1], math.ceil((new_tat - now) / 1000) + tonumber(ARGV[5]))
return {1, text(wait), text(rate), stored}
