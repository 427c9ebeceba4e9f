-- A metered call's part of each limit of one key (KEYS: one bucket a
-- limit; the key's rate among them, for its requests, in the rate's own
-- bucket), all or none, on Redis's clock: the same GCRA as the local rate
-- cell (src/rate/gcra.rs). Every limit takes its part at once if every
-- one has room now; else none takes anything, and the answer is the
-- longest wait and which limit it is.
--
-- Runs after now.lua (`now`, `text`). ARGV: [1] the pinned time, or '';
-- [2] how long an idle key's state is kept, in milliseconds; [3] the
-- longest pause, in microseconds; then five for each key, from [4]: its
-- starting rate (calls a second), burst, lower and upper bounds, and the
-- call's cost in it.
--
-- Returns '1' and, for each key, its mark: the tat after the call's part
-- and the key's given-back total before it (`end,shifted`, what a
-- give-back of settle_limit.lua is measured by); or '0', the wait in
-- microseconds and the index (from 0) of the key that waits longest.
--
-- What it reads is checked as decide.lua checks it: a rate, tat or total
-- that is no number, not finite or not above 0 reads as missing; a key
-- that is no hash is deleted; a rate out of the bounds is clamped into
-- them; a tat further ahead than any bucket can owe is cut to that.
local idle = tonumber(ARGV[2]) * 1000
local max_pause = tonumber(ARGV[3])
local huge = math.huge
local parts = {}
local longest, which = 0, 0
for i = 1, #KEYS do
  local at = 4 + (i - 1) * 5
  local burst, cost = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 4])
  local lower, upper = tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  local state = redis.pcall('HMGET', KEYS[i], 't', 'r', 'g')
  if state.err then
    redis.call('DEL', KEYS[i])
    state = {}
  end
  local rate = tonumber(state[2])
  if not (rate and rate > 0 and rate < huge) then rate = tonumber(ARGV[at]) end
  rate = math.min(math.max(rate, lower), upper)
  local interval = 1000000 / rate
  local tat = tonumber(state[1])
  if not (tat and tat > 0 and tat < huge) then tat = now end
  local most_owed = now + interval * burst + max_pause
  if tat > most_owed + 1 then tat = most_owed end
  local given = tonumber(state[3])
  if not (given and given > 0 and given < huge) then given = 0 end
  local new_tat = math.max(tat, now) + interval * cost
  local wait = math.max(new_tat - interval * burst, now) - now
  if wait > longest then longest, which = wait, i end
  parts[i] = {new_tat, rate, given}
end
if longest > 0 then
  return '0 ' .. text(longest) .. ' ' .. (which - 1)
end
local answer = {'1'}
for i = 1, #KEYS do
  local part = parts[i]
  -- Kept the idle time and a half after its debt runs out, as decide.lua
  -- keeps a rate ('x': when it expires, for decide.lua to tell when to
  -- move it).
  local expires = part[1] + idle * 1.5
  redis.call('HSET', KEYS[i], 't', text(part[1]), 'r', text(part[2]), 'g', text(part[3]),
    'x', text(expires))
  redis.call('PEXPIRE', KEYS[i], math.ceil((expires - now) / 1000))
  answer[#answer + 1] = text(part[1]) .. ',' .. text(part[3])
end
return table.concat(answer, ' ')
