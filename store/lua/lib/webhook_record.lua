-- requires: now.lua
-- Shared by the scripts that write an event a webhook may report (`-- include: webhook_record.lua`):
-- emit.lua for terminal events, pause.lua for requires_action. The delivery is
-- recorded in the same step as its event, so no event a webhook must report is written without
-- its delivery. The `toolq webhooks` process sends it (store/deliveries.py).
--
-- The job's target is its record's `webhook` field (written by submit.lua): {"url", "events"}.
local function record_webhook(job, job_id, kind, delivery_id, delivery, due, wake, job_deliveries, ev)
  if kind == '' then return end
  local target = redis.call('HGET', job, 'webhook')
  if not target then return end
  local w = cjson.decode(target)
  local wanted = false
  for _, e in ipairs(w.events) do
    if e == kind then wanted = true end
  end
  if not wanted then return end
  local now = redis_now_ms()
  redis.call('HSET', delivery, 'id', delivery_id, 'job_id', job_id, 'tenant', redis.call('HGET', job, 'tenant'),
             'url', w.url, 'type', kind, 'event', ev, 'status', 'pending', 'attempts', 0,
             'created_ms', now, 'since_ms', now, 'next_ms', now)
  redis.call('ZADD', due, now, delivery_id)
  redis.call('RPUSH', job_deliveries, delivery_id)
  redis.call('LPUSH', wake, delivery_id)
  redis.call('LTRIM', wake, 0, 0)  -- one token wakes the sender; it then claims everything due
end
