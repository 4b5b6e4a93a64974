-- Shared by the scripts that set or read leases (`-- include: now.lua`).
-- Leases are measured on Redis's clock, the one clock every worker shares: worker clocks may be
-- skewed or jump (a paused VM), which would otherwise read as an expired lease.
-- Read once per call: a script runs alone and in well under a millisecond, so its snippets share
-- one instant, and TIME costs as much as a small write.
local now_ms_read = nil
local function redis_now_ms()
  if not now_ms_read then
    local t = redis.call('TIME')
    now_ms_read = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now_ms_read
end
