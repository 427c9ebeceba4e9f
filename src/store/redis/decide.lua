-- One call's rate tokens from the shared bucket of KEYS[1]: the same GCRA
-- as the local rate cell (src/rate/gcra.rs), on Redis's clock.
--
-- Runs after now.lua (`now`, `text`). ARGV: [1] the pinned time, or '';
-- [2] the starting rate (calls a second) of a key Redis has no state for;
-- [3] the burst; [4] how long the caller waits at most, in microseconds
-- (-1: however long); [5] how long an idle key's state is kept, in
-- milliseconds; [6] the call's cost in tokens (at most the burst).
--
-- Returns one string, its fields apart by spaces: admitted (1 or 0), the
-- wait in microseconds, the rate, and for an admitted call the tat after
-- it. One string, not a table: the client parses one value instead of
-- four. A refused call takes nothing.
local state = redis.call('HMGET', KEYS[1], 't', 'r', 'x')
local tat = tonumber(state[1]) or now
-- The rate's text goes back as stored: no formatting on a busy key.
local rate_text = state[2] or ARGV[2]
local rate = tonumber(rate_text)
local burst = tonumber(ARGV[3])
local max_wait = tonumber(ARGV[4])
local interval = 1000000 / rate
local new_tat = math.max(tat, now) + interval * tonumber(ARGV[6])
local start = math.max(new_tat - interval * burst, now)
local wait = start - now
if max_wait >= 0 and wait > max_wait then
  return '0 ' .. text(wait) .. ' ' .. rate_text
end
local stored = text(new_tat)
-- The key is kept at least the idle time after its debt runs out. Its
-- expiry ('x', in the script's microseconds) moves only when it falls
-- short of that, and then half the idle time further: a busy key's
-- decision writes one field and sets no expiry.
local idle = tonumber(ARGV[5]) * 1000
local expires = tonumber(state[3])
local keep = not expires or expires < new_tat + idle
if state[1] and not keep then
  redis.call('HSET', KEYS[1], 't', stored)
elseif state[1] then
  expires = new_tat + idle * 1.5
  redis.call('HSET', KEYS[1], 't', stored, 'x', text(expires))
else
  -- A new key: its use is measured from now (usage.rs `fresh`).
  expires = new_tat + idle * 1.5
  redis.call('HSET', KEYS[1], 't', stored, 'r', rate_text, 'us', text(now), 'uc', 0,
    'x', text(expires))
end
if keep then
  redis.call('PEXPIRE', KEYS[1], math.ceil((expires - now) / 1000))
end
-- A call that need not wait (most, on a busy key) gets a plain 0.
if wait <= 0 then wait = '0' else wait = text(wait) end
return '1 ' .. wait .. ' ' .. rate_text .. ' ' .. stored
