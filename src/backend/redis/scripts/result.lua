-- Outcomes and progress (SPEC 3). ARGV: now, op, ...
-- outcome: id; returns {found, kind, value, at, events_tail} (found 0/1).
-- progress: id, lease, bytes (fenced); returns 1, or 0 when the receipt is lost.
-- chunk: id, lease, bytes (fenced); returns the chunk's seq, or 0 when lost.
-- chunks: id, after_seq; returns {{seq, data...}, finished 0/1, events_tail}.
local op = ARGV[2]
local id = ARGV[3]
local function live_outcome(now)
  local exp = redis.call('ZSCORE', K_OUT_EXP, pad(id))
  if not exp or tonumber(exp) <= now then return nil end
  return redis.call('HMGET', out_key(id), 'kind', 'value', 'at')
end
if op == 'outcome' then
  local f = live_outcome(clock_now())
  if f and f[1] then return { 1, f[1], f[2] or '', f[3] or '0', events_tail() } end
  return { 0, '', '', '0', events_tail() }
elseif op == 'progress' then
  if not current(id, ARGV[4]) then return 0 end
  redis.call('SET', prog_key(id), ARGV[5])
  event(id)
  return 1
elseif op == 'chunk' then
  if not current(id, ARGV[4]) then return 0 end
  local seq = redis.call('RPUSH', chunks_key(id), ARGV[5])
  event(id)
  return seq
else
  local after = tonumber(ARGV[4])
  local f = live_outcome(clock_now())
  local finished = 0
  if f and f[1] then finished = 1 end
  local list = redis.call('LRANGE', chunks_key(id), after, -1)
  return { list, finished, events_tail() }
end
