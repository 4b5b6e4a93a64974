-- Count one wrong key from a client address (gateway/wrong_keys.py). The window starts at the
-- first wrong key and the counter expires with it; INCR and its expiry in one step, so a crash
-- between them cannot leave a counter that never expires (an address locked out for good).
-- KEYS[1] counter     toolq:wrong-keys:<address>
-- ARGV[1] window_ms   how long the window lasts
-- Returns {wrong keys in this window, ms until the window ends}.
local n = redis.call('INCR', counter)
local left = redis.call('PTTL', counter)
if left < 0 then
  redis.call('PEXPIRE', counter, window_ms)
  left = tonumber(window_ms)
end
return {n, left}
