-- A look at KEYS[1]'s shared bucket, changing nothing.
--
-- Runs after now.lua and checks.lua (`now`, `text`, `fields`, `number`).
-- Returns {rate, debt in microseconds}: the key's rate, and how far its
-- theoretical arrival time is ahead of now (negative: the bucket is
-- full); {'', ''} for a key Redis holds no usable state for (none, or no
-- rate a decision would use: the next one starts the key afresh). A tat
-- that is no time reads as a full bucket, as decisions read it.
local state = fields('t', 'r')
local rate = number(state[2], 'r', 0)
if not state[1] or not rate then
  return {'', ''}
end
local tat = number(state[1], 't', 0) or now
return {text(rate), text(tat - now)}
