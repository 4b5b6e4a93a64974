-- requires: now.lua
-- Shared (`-- include: tenant_bytes.lua`) by the scripts that write what a tenant sends: the bytes
-- each tenant keeps in Redis, against its quota (store/byte_quota.py states the rule).
--
-- Per tenant one hash, `<bytes_prefix><tenant>`: an *item* (`<kind> <key>`: the kind, a space,
-- the Redis key that holds the bytes) -> its bytes, and `#total` and `#<kind>` -> the sums. Beside
-- it `<bytes_prefix><tenant>:due`, a sorted set: item -> when to look at its key again. Keys
-- expire on their own TTLs and scripts delete them in many places, so no writer releases bytes:
-- each charge first looks at a few items that are due, releases those whose key is gone, and
-- puts the others off until their TTL ends (or BYTES_RECHECK_MS, for a key without one). A
-- tenant's count is so never below what it keeps, and comes back down within a few charges of a
-- key's end.

local BYTES_SWEEP = 16           -- items looked at per charge
local BYTES_RECHECK_MS = 60000   -- when to look again at a key that has no TTL (yet)

local function bytes_release(h, item)
  local b = tonumber(redis.call('HGET', h, item) or '0')
  redis.call('HDEL', h, item)
  redis.call('ZREM', h .. ':due', item)
  local kind = string.match(item, '^(%S+) ')
  redis.call('HINCRBY', h, '#total', -b)
  if kind then redis.call('HINCRBY', h, '#' .. kind, -b) end
end

local function bytes_sweep(h, now)
  local due = h .. ':due'
  for _, item in ipairs(redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, BYTES_SWEEP)) do
    local ttl = redis.call('PTTL', string.match(item, '^%S+ (.*)$') or item)
    if ttl == -2 then
      bytes_release(h, item)
    elseif ttl == -1 then
      redis.call('ZADD', due, now + BYTES_RECHECK_MS, item)
    else
      redis.call('ZADD', due, now + ttl + 1, item)
    end
  end
end

-- Charge `add` more bytes to `key` (of `kind`: job, thread, file, ...) for `tenant`, or refuse.
-- nil: charged. Else {-30, held, quota, add, jobs, threads, files}: the tenant holds `held` bytes
-- and `add` more would take it past `quota`; nothing is charged (the sweep's releases stand).
-- `quota` '' charges without a bound (the copy a run makes of what was charged already).
local function bytes_charge(prefix, tenant, kind, key, add, quota)
  local h = prefix .. tenant
  local now = redis_now_ms()
  bytes_sweep(h, now)
  add = tonumber(add)
  if quota ~= '' and add > 0 then
    local held = tonumber(redis.call('HGET', h, '#total') or '0')
    if held + add > tonumber(quota) then
      local k = redis.call('HMGET', h, '#job', '#thread', '#file')
      return {-30, held, tonumber(quota), add, tonumber(k[1] or '0'), tonumber(k[2] or '0'), tonumber(k[3] or '0')}
    end
  end
  local item = kind .. ' ' .. key
  redis.call('HINCRBY', h, item, add)
  redis.call('HINCRBY', h, '#total', add)
  redis.call('HINCRBY', h, '#' .. kind, add)
  redis.call('ZADD', h .. ':due', 'NX', now + BYTES_RECHECK_MS, item)
  return nil
end

-- The bytes counted for `key` (of `kind`) of `tenant`: 0 when none are.
local function bytes_of(prefix, tenant, kind, key)
  return tonumber(redis.call('HGET', prefix .. tenant, kind .. ' ' .. key) or '0')
end

-- A run's messages appended to its thread at its end (thread_end.lua) are the model's, bounded by
-- the run's max_tokens, and never refused; thread_end.lua notes their bytes in the thread's
-- `unbilled`, and the thread's next charge (a message added, a run queued) counts them first.
local function bytes_fold(prefix, tenant, thread, messages)
  local unbilled = tonumber(redis.call('HGET', thread, 'unbilled') or '0')
  if unbilled > 0 then
    bytes_charge(prefix, tenant, 'thread', messages, unbilled, '')
    redis.call('HSET', thread, 'unbilled', 0)
  end
end
