-- Shared by the scripts that set or read leases (`-- include: now.lua`).
-- Leases are measured on Redis's clock, the one clock every worker shares: worker clocks may be
-- skewed or jump (a paused VM), which would otherwise read as an expired lease.
local function redis_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
