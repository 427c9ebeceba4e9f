-- One call's rate tokens from the shared bucket of KEYS[1]: the same GCRA
-- as the local rate cell (src/rate/gcra.rs), on Redis's clock.
--
-- Runs after now.lua (`now`, `text`). ARGV:
-- [1] the pinned time, or ''; [2] the starting rate (calls a second) of a
-- key Redis has no state for; [3] the burst; [4] how long the caller
-- waits at most, in microseconds (-1: however long); [5] how long an idle
-- key's state is kept, in milliseconds; [6] the call's cost in tokens (at
-- most the burst); [7] and [8] the rate's lower and upper bounds; [9] the
-- longest pause, in microseconds.
--
-- Returns one string, its fields apart by spaces: admitted (1 or 0), the
-- wait in microseconds, the rate, and for an admitted call the tat after
-- it; with a leading '!' when the key held something to mend. One
-- string, not a table: the client parses one value instead of four. A
-- refused call takes nothing.
--
-- What it reads is checked as checks.lua checks it (store/mod.rs, "What a
-- store reads"), inline, since this runs for every call: a rate or time
-- that is no number, not finite, or not above 0 reads as missing (a
-- missing rate is the starting rate, a missing tat a full bucket) and is
-- deleted; a key that is no hash is deleted; a rate out of the bounds is
-- clamped into them; a tat further ahead than any bucket can owe (the
-- burst's intervals and the longest pause) is cut to that. No call books
-- further ahead than the longest pause either.
local state = redis.pcall('HMGET', KEYS[1], 't', 'r', 'x')
-- Whether anything was mended; the fields to delete; a key of another type.
local repaired, garbage, not_hash = false, nil, false
if state.err then
  state, not_hash, repaired = {}, true, true
end
-- A usable number is finite and above 0 (NaN fails `x > 0`).
local huge = math.huge
local lower, upper = tonumber(ARGV[7]), tonumber(ARGV[8])
local max_pause = tonumber(ARGV[9])
-- The rate's text goes back as stored: no formatting on a busy key.
local rate_text = state[2]
local rate = tonumber(rate_text)
local clamped = false
if not (rate and rate > 0 and rate < huge) then
  if rate_text then repaired, garbage = true, {'r'} end
  rate, rate_text = tonumber(ARGV[2]), ARGV[2]
elseif rate < lower or rate > upper or rate_text:find('[^%d.e+-]') then
  -- Out of the bounds, or a number the client would not read back as one
  -- ('0x10', ' 5': Lua's own notations, or a space that would shift the
  -- answer's fields): written again in the scripts' own form.
  rate = math.min(math.max(rate, lower), upper)
  rate_text, clamped = text(rate), true
end
local burst = tonumber(ARGV[3])
local interval = 1000000 / rate
local tat = tonumber(state[1])
if not (tat and tat > 0 and tat < huge) then
  if state[1] then
    repaired = true
    garbage = garbage or {}
    garbage[#garbage + 1] = 't'
  end
  tat = nil
end
local fresh = not tat
tat = tat or now
-- A microsecond's leeway for the rounding of what was stored.
local most_owed = now + interval * burst + max_pause
if tat > most_owed + 1 then
  tat, repaired = most_owed, true
end
local max_wait = tonumber(ARGV[4])
if max_wait < 0 or max_wait > max_pause then max_wait = max_pause end
local new_tat = math.max(tat, now) + interval * tonumber(ARGV[6])
local start = math.max(new_tat - interval * burst, now)
local wait = start - now
local expires = tonumber(state[3])
if not (expires and expires > 0 and expires < huge) then
  if state[3] then
    repaired = true
    garbage = garbage or {}
    garbage[#garbage + 1] = 'x'
  end
  expires = nil
end
if not_hash then
  redis.call('DEL', KEYS[1])
elseif garbage then
  redis.call('HDEL', KEYS[1], unpack(garbage))
end
local mark = repaired and '!' or ''
local idle = tonumber(ARGV[5]) * 1000
if wait > max_wait then
  if repaired and not fresh then
    -- What was used instead goes back, so the key is mended once.
    redis.call('HSET', KEYS[1], 't', text(tat), 'r', rate_text)
  end
  return mark .. '0 ' .. text(wait) .. ' ' .. rate_text
end
local stored = text(new_tat)
-- The key is kept at least the idle time after its debt runs out. Its
-- expiry ('x', in the script's microseconds) moves only when it falls
-- short of that, and then half the idle time further: a busy key's
-- decision writes one field and sets no expiry.
local keep = fresh or repaired or not expires or expires < new_tat + idle
if fresh then
  -- A new key (or one whose state was no bucket's): its use is measured
  -- from now (usage.rs `fresh`).
  expires = new_tat + idle * 1.5
  redis.call('HSET', KEYS[1], 't', stored, 'r', rate_text, 'us', text(now), 'uc', 0,
    'x', text(expires))
elseif keep then
  expires = new_tat + idle * 1.5
  if repaired or clamped then
    redis.call('HSET', KEYS[1], 't', stored, 'r', rate_text, 'x', text(expires))
  else
    redis.call('HSET', KEYS[1], 't', stored, 'x', text(expires))
  end
elseif clamped then
  redis.call('HSET', KEYS[1], 't', stored, 'r', rate_text)
else
  redis.call('HSET', KEYS[1], 't', stored)
end
if keep then
  redis.call('PEXPIRE', KEYS[1], math.ceil((expires - now) / 1000))
end
-- A call that need not wait (most, on a busy key) gets a plain 0.
if wait <= 0 then wait = '0' else wait = text(wait) end
return mark .. '1 ' .. wait .. ' ' .. rate_text .. ' ' .. stored
