-- Shared (`-- include: wake_push.lua`) by every script that wakes workers: a wake token onto a
-- wake list that keeps at most `backlog` tokens. LPUSH answers with the list's length, so the
-- trim runs only when there is something to trim; most pushes find the list short, since idle
-- workers pop their tokens at once.

local function wake_push(list, token, backlog)
  if redis.call('LPUSH', list, token) > tonumber(backlog) then
    redis.call('LTRIM', list, 0, tonumber(backlog) - 1)
  end
end
