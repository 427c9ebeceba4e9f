-- What one outcome does to the shared rate of KEYS[1]: the same rules as
-- the local rate cell (src/rate/cell.rs, aimd.rs, usage.rs), on Redis's
-- clock, keeping the bucket's debt (no fresh burst, no forgiven debt).
--
-- Runs after now.lua and checks.lua (`now`, `text`, `fields`, `number`). ARGV:
-- [1] the pinned time, or ''; [2] the kind: 's' success, 'f' failure
-- (overload), 'c' a token handed back, 'p' a pause; [3] for 's' and 'f',
-- how long ago the call was scheduled, in microseconds; for 'c', the tat
-- the decision stored; for 'p', the pause in microseconds; [4] for 's',
-- how long ago the call started; for 'c', the debt its tokens added; [5]
-- starting rate; [6] burst; [7] lower bound; [8] upper bound; [9]
-- increment; [10] 'sub' or 'mul'; [11] the decrement or factor; [12]
-- cooldown in microseconds; [13] idle TTL in milliseconds; [14] for 's',
-- the headroom (how far above its use this success may raise the rate:
-- further if the call waited for its token, aimd.rs validated_ceiling);
-- [15] for 's', the tokens the call took (its use of the rate, usage.rs);
-- [16] the longest pause, in microseconds.
--
-- Returns the rate after the outcome, as a string, with a leading '!'
-- when the key held something to mend. What it reads is checked as
-- decide.lua checks it; besides, a time of the past ('d', when the rate
-- last fell; 'us', since when its use is counted) that lies ahead of now
-- reads as missing, and so does a negative count of use.
local key, kind = KEYS[1], ARGV[2]
local state = fields('t', 'r', 'd', 'us', 'uc')
local starting, burst = tonumber(ARGV[5]), tonumber(ARGV[6])
local lower, upper = tonumber(ARGV[7]), tonumber(ARGV[8])
local max_pause = tonumber(ARGV[16])
local changes = {}

local function clamp(r) return math.min(math.max(r, lower), upper) end

-- A time of the past, read from field `name`: missing (and garbage) if
-- ahead of now.
local function past(value, name)
  local at = number(value, name, 0)
  if at and at > now then
    repaired = true
    garbage = garbage or {}
    garbage[#garbage + 1] = name
    return nil
  end
  return at
end

local rate = number(state[2], 'r', 0)
local rate_missing = not rate
if rate_missing then
  rate = starting
elseif rate ~= clamp(rate) then
  rate = clamp(rate)
  table.insert(changes, 'r'); table.insert(changes, text(rate))
end
local tat = number(state[1], 't', 0) or now
local most_owed = now + 1000000 / rate * burst + max_pause
if tat > most_owed + 1 then
  tat, repaired = most_owed, true
  table.insert(changes, 't'); table.insert(changes, text(tat))
end
local last_decrease = past(state[3], 'd')

-- gcra.rs rescale: the tokens owed stay the same; debt of calls already
-- scheduled is theirs. (The local cell moves its own waiters on a fall,
-- falls.rs; calls waiting on this script's decisions are in other
-- processes, and keep their places.)
local function rescale(old_rate, new_rate)
  local old_interval, new_interval = 1000000 / old_rate, 1000000 / new_rate
  local anchor = math.max(now, tat - old_interval * burst)
  if tat <= anchor or old_interval == new_interval then return end
  tat = anchor + (tat - anchor) * new_interval / old_interval
  table.insert(changes, 't'); table.insert(changes, text(tat))
end

local function set_rate(new_rate, fell)
  rescale(rate, new_rate)
  rate = new_rate
  table.insert(changes, 'r'); table.insert(changes, text(rate))
  table.insert(changes, 'f'); table.insert(changes, fell)
end

if kind == 's' then
  local scheduled = now - tonumber(ARGV[3])
  local started = now - tonumber(ARGV[4])
  -- aimd.rs success_cannot_move: a fixed rate at its bound counts no use.
  if not (rate >= upper and rate <= starting) then
    -- usage.rs: successes a second over a window of 1 to 2 seconds.
    local window = 1000000
    local since = past(state[4], 'us') or started
    local count = number(state[5], 'uc', -1) or 0
    if count < 0 then count = 0 end
    local elapsed = math.max(started - since, 0)
    if elapsed >= 2 * window then
      count = count * window / elapsed
      since = started - window
      elapsed = window
    end
    count = count + tonumber(ARGV[15])
    local used = count / (elapsed / 1000000 + 1 / rate)
    table.insert(changes, 'us'); table.insert(changes, text(since))
    table.insert(changes, 'uc'); table.insert(changes, text(count))
    -- aimd.rs after_success: news raises the rate by the increment; any
    -- success brings it down to the ceiling its use validates.
    local ceiling = math.max(tonumber(ARGV[14]) * used, starting)
    local raised = rate
    if last_decrease == nil or scheduled >= last_decrease then
      raised = clamp(rate + tonumber(ARGV[9]))
    end
    local new_rate = math.min(raised, ceiling)
    if new_rate ~= rate then set_rate(new_rate, new_rate < rate and 1 or 0) end
  end
elseif kind == 'f' then
  local scheduled = now - tonumber(ARGV[3])
  local cooldown = tonumber(ARGV[12])
  local news = last_decrease == nil or scheduled >= last_decrease
  if news and (last_decrease == nil or now >= last_decrease + cooldown) then
    table.insert(changes, 'd'); table.insert(changes, text(now))
    local step = tonumber(ARGV[11])
    local lowered
    if ARGV[10] == 'mul' then lowered = rate * step else lowered = rate - step end
    local new_rate = clamp(lowered)
    if new_rate ~= rate then set_rate(new_rate, 1) end
  end
elseif kind == 'c' then
  -- gcra.rs cancel: only the last token taken goes back.
  if state[1] == ARGV[3] then
    tat = tat - tonumber(ARGV[4])
    table.insert(changes, 't'); table.insert(changes, text(tat))
  end
elseif kind == 'p' then
  -- cell.rs pause_until: no call starts before the pause ends.
  local pause = math.min(tonumber(ARGV[3]), max_pause)
  local paused = now + pause + (1000000 / rate) * (burst - 1)
  if paused > tat then
    tat = paused
    table.insert(changes, 't'); table.insert(changes, text(tat))
  end
end
-- Garbage goes: what was read as missing is missing. (A key that was no
-- hash is gone already, and starts afresh at the next decision.)
forget_garbage()
if #changes > 0 then
  if rate_missing then
    table.insert(changes, 'r'); table.insert(changes, text(rate))
  end
  -- Kept the idle time after the debt runs out, as decide.lua keeps it
  -- ('x': when it expires, for decide.lua to tell when to move it).
  local expires = math.max(tat, now) + tonumber(ARGV[13]) * 1000
  table.insert(changes, 'x'); table.insert(changes, text(expires))
  redis.call('HSET', key, unpack(changes))
  redis.call('PEXPIRE', key, math.ceil((expires - now) / 1000))
end
return (repaired and '!' or '') .. text(rate)
