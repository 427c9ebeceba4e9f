-- A look at KEYS[1]'s shared bucket, changing nothing.
--
-- Runs after now.lua (`now`, `text`). Returns {rate, debt in
-- microseconds}: the key's rate, and how far its theoretical arrival time
-- is ahead of now (negative: the bucket is full); {'', ''} for a key Redis
-- holds no state for.
local state = redis.call('HMGET', KEYS[1], 't', 'r')
if not state[1] or not state[2] then
  return {'', ''}
end
return {state[2], text(tonumber(state[1]) - now)}
