-- Send one call to a tool service: the call goes on the tool's stream, unless a result for its
-- call id was already accepted (a resumed job asking again), which is then returned instead.
-- The entry's id is Redis's clock at the send, so its deadline is id's ms + timeout_ms on the
-- one clock every process shares.
--
-- KEYS[1] calls       the tool's call stream (toolq.keys.tool_calls)
-- KEYS[2] result      the call's accepted result (toolq.keys.tool_result)
-- ARGV[1] call_id     the idempotency key
-- ARGV[2] arguments   the checked arguments, JSON
-- ARGV[3] timeout_ms  how long the caller waits
-- ARGV[4] traceparent the caller's W3C trace context, carried to the service (toolq/tracing); '' none
-- ARGV[5] tracestate  its tracestate; '' none
--
-- Returns the accepted result's payload, or false when the call was sent.

local done = redis.call('GET', result)
if done then return done end
local fields = {'call_id', call_id, 'arguments', arguments, 'timeout_ms', timeout_ms}
if traceparent ~= '' then
  table.insert(fields, 'traceparent')
  table.insert(fields, traceparent)
  if tracestate ~= '' then
    table.insert(fields, 'tracestate')
    table.insert(fields, tracestate)
  end
end
redis.call('XADD', calls, '*', unpack(fields))
return false
