-- Keep a Responses-API response of a tenant (store/responses.py) for its TTL, and count its bytes
-- (its request's tools and options: the input is in its job) in the tenant's share of Redis
-- (tenant_bytes.lua). Counted, never refused: the job that answers it was charged, and refused
-- past the quota, when it was submitted.
--
-- include: tenant_bytes.lua
--
-- KEYS[1] response        the response's hash
-- ARGV[1] tenant          its tenant
-- ARGV[2] fields          the hash's fields, a JSON object of strings
-- ARGV[3] ttl_s           how long it lives
-- const bytes_prefix      store.keys.TENANT_BYTES_PREFIX

local size = 0
local flat = {}
for k, v in pairs(cjson.decode(fields)) do
  table.insert(flat, k)
  table.insert(flat, v)
  size = size + #k + #v
end
redis.call('HSET', response, unpack(flat))
redis.call('EXPIRE', response, ttl_s)
bytes_charge(bytes_prefix, tenant, 'job', response, size, '')
return 1
