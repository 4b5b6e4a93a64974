-- Store one file of a tenant (store/files.py) within its quota of bytes, in one step: its record,
-- its content and its entry in the tenant's index, each with the file's TTL, and its bytes in the
-- tenant's count (tenant_bytes.lua).
--
-- include: tenant_bytes.lua
--
-- KEYS[1] meta            the file's record (hash)
-- KEYS[2] content         its content
-- KEYS[3] index           the tenant's files (sorted set: file id -> expiry, unix s)
-- ARGV[1] tenant          its tenant
-- ARGV[2] file_id         its id
-- ARGV[3] record          the record's fields, a JSON object of strings
-- ARGV[4] data            the content
-- ARGV[5] ttl_s           how long it lives
-- ARGV[6] expires_at      when it expires (unix s): its score in the index
-- const bytes_prefix      store.keys.TENANT_BYTES_PREFIX
-- ARGV[7] store_bytes     the bytes the tenant may keep in Redis; '' counts without a bound
--
-- Returns {1} stored, or tenant_bytes.lua's {-30, held, quota, add, jobs, threads, files}.

local full = bytes_charge(bytes_prefix, tenant, 'file', content, #data, store_bytes)
if full then return full end
local fields = {}
for k, v in pairs(cjson.decode(record)) do
  table.insert(fields, k)
  table.insert(fields, v)
end
redis.call('HSET', meta, unpack(fields))
redis.call('SET', content, data, 'EX', ttl_s)
redis.call('EXPIRE', meta, ttl_s)
redis.call('ZADD', index, expires_at, file_id)
redis.call('EXPIRE', index, ttl_s)
return {1}
