-- requires: thread_turns.lua
-- requires: thread_touch.lua
-- Included by emit.lua (`-- include: thread_end.lua`): what a run's
-- terminal event does to its thread, in the same step as the event itself.
--
-- The active run's messages from `thread_from` on (its input, the assistant's calls, the tool
-- results, the answer) are appended to the thread when it succeeded, or whatever its status when
-- its record says `thread_keep` 'partial' (the caller asked for partial history, or a run that
-- interrupted it did); never when it says 'none' (a run rolled it back). Then the next waiting
-- run starts. A run that ends while still waiting (cancelled) only leaves the line.
-- `produced` is the JSON array of the run's messages, each a Message JSON string
-- (store/thread_ending.py); '' when there is nothing to append.
local function thread_end(job, job_id, status, produced, thread_prefix, job_prefix)
  local f = redis.call('HMGET', job, 'thread', 'thread_from', 'thread_keep')
  if not f[1] or f[1] == '' then return end
  local tkey = thread_prefix .. '{' .. f[1] .. '}'
  if redis.call('HGET', tkey, 'active') ~= job_id then
    redis.call('ZREM', tkey .. ':waiting', job_id)
    return
  end
  local ran = redis.call('HMGET', job, 'worker', 'model')
  if ran[1] and ran[1] ~= '' then  -- it holds the thread's state now: the next run is offered to it
    redis.call('HSET', tkey, 'holder', ran[1], 'holder_model', ran[2] or '')
  end
  local keep = (status == 'succeeded' and f[3] ~= 'none') or f[3] == 'partial'
  if keep and produced ~= '' then
    local msgs = cjson.decode(produced)
    local size = 0
    for i = tonumber(f[2]) + 1, #msgs do
      local id = 'msg_' .. string.sub(job_id, 5) .. '_' .. i
      redis.call('RPUSH', tkey .. ':messages', msgs[i])
      redis.call('RPUSH', tkey .. ':ids', id)
      size = size + #msgs[i] + #id
    end
    -- counted in its tenant's bytes at the thread's next charge (tenant_bytes.lua: bytes_fold)
    if size > 0 then redis.call('HINCRBY', tkey, 'unbilled', size) end
  end
  thread_next(tkey, job_prefix)
  thread_touch(tkey)
end
