-- Queue one attempt of an existing job as arq's ArqRedis.enqueue_job stores it, and wake a worker
-- of its model: store/arq_link.py (enqueue_attempt) builds every value. Like enqueue_job,
-- it queues nothing while a job or a result of that arq id exists; the wake token is pushed
-- either way, as the two calls it stands for did.
-- include: wake_push.lua
-- include: arq_enqueue.lua
-- KEYS[1] arq_job       the attempt's arq job key
-- KEYS[2] arq_result    the attempt's arq result key
-- KEYS[3] queue         the model's queue (arq's sorted set)
-- KEYS[4] wake          the model's wake list
-- ARGV[1] arq_id        the attempt's arq id (job id:attempt)
-- ARGV[2] payload       arq's job payload (msgpack)
-- ARGV[3] expires_ms    the job key's lifetime
-- ARGV[4] score         unix ms from which the job may run
-- ARGV[5] token         the wake token: the job id
-- const wake_backlog   wake tokens the list keeps
arq_enqueue(arq_job, arq_result, queue, arq_id, payload, expires_ms, score)
wake_push(wake, token, wake_backlog)
