-- A metered call's settled cost in one limit of a key (KEYS[1]: a named
-- limit's bucket, or the key's rate's for its requests): the tokens
-- it cost beyond what it took are owed from now; the tokens it took and
-- did not use go back, as much of them as still lies ahead of now (the
-- same rule as src/rate/gcra.rs `returnable`).
--
-- Runs after now.lua (`now`, `text`). ARGV: [1] the pinned time, or '';
-- [2] the tokens more (negative: fewer) than the call took; [3] and [4]
-- the call's mark from limits.lua (the tat after its part, and the key's
-- given-back total before it; '' for none: nothing goes back); [5] the
-- starting rate; [6] the burst; [7] and [8] the rate's bounds; [9] how
-- long an idle key's state is kept, in milliseconds; [10] the longest
-- pause, in microseconds.
--
-- Returns the tat after it. What it reads is checked as limits.lua
-- checks it.
local huge = math.huge
local state = redis.pcall('HMGET', KEYS[1], 't', 'r', 'g')
if state.err then
  redis.call('DEL', KEYS[1])
  state = {}
end
local rate = tonumber(state[2])
if not (rate and rate > 0 and rate < huge) then rate = tonumber(ARGV[5]) end
rate = math.min(math.max(rate, tonumber(ARGV[7])), tonumber(ARGV[8]))
local interval = 1000000 / rate
local tat = tonumber(state[1])
if not (tat and tat > 0 and tat < huge) then tat = now end
local most_owed = now + interval * tonumber(ARGV[6]) + tonumber(ARGV[10])
if tat > most_owed + 1 then tat = most_owed end
local given = tonumber(state[3])
if not (given and given > 0 and given < huge) then given = 0 end
local more = tonumber(ARGV[2])
if more >= 0 then
  tat = math.max(tat, now) + interval * more
else
  local finish, shifted = tonumber(ARGV[3]), tonumber(ARGV[4])
  local back = 0
  if finish and shifted and tat > now then
    local ahead = finish - math.max(given - shifted, 0) - now
    back = math.max(math.min(-more * interval, ahead), 0)
  end
  if back > 0 then
    given = given + back
    tat = math.max(tat - back, now)
  end
end
-- Kept as limits.lua keeps it.
local expires = math.max(tat, now) + tonumber(ARGV[9]) * 1500
redis.call('HSET', KEYS[1], 't', text(tat), 'r', text(rate), 'g', text(given), 'x', text(expires))
redis.call('PEXPIRE', KEYS[1], math.ceil((expires - now) / 1000))
return text(tat)
