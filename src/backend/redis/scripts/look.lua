-- peek / backlog_by_flow, read only. ARGV: now, mode ("peek"/"flows"), n.
-- Walks claim order: the due lane with the delayed items already due
-- ranked into it as a promotion now would (SPEC 3, Priority), then the
-- backlog. peek skips paused flows and returns {{id, flow, payload, enq,
-- nb, dlv, pri}...}; flows counts every item and returns {flow...}.
local now = clock_now()
local peek = ARGV[2] == 'peek'
local n = tonumber(ARGV[3])
local out = {}
local function visit(id)
  local f = redis.call('HMGET', item_key(id), 'flow', 'payload', 'enq', 'nb', 'dlv', 'pri')
  if not f[2] then return end
  local flow = f[1] or ''
  if peek then
    if flow == '' or redis.call('SISMEMBER', K_PAUSED, flow) == 0 then
      out[#out + 1] = { id, flow, f[2], f[3] or '0', f[4] or '', f[5] or '0', f[6] or '0' }
    end
  else
    out[#out + 1] = flow
  end
end
-- The delayed items a promotion now would move, with their ranks.
local ready = {}
local clock = tonumber(redis.call('HGET', K_CLOCKS, 'due') or '0')
local pos = tonumber(redis.call('GET', K_POS) or '0')
local due_now = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'WITHSCORES')
for i = 1, #due_now, 2 do
  local id = unpad(due_now[i])
  local nb = tonumber(due_now[i + 1])
  if nb > clock then clock = nb end
  pos = pos + 1
  local boost = tonumber(redis.call('HGET', item_key(id), 'boost') or '0')
  ready[#ready + 1] = { clock - boost, pos, id }
end
table.sort(ready, function(a, b)
  if a[1] ~= b[1] then return a[1] < b[1] end
  return a[2] < b[2]
end)
local r = 1
local function walk(zset, merge)
  local offset = 0
  while #out < n do
    local page = redis.call('ZRANGE', zset, offset, offset + 199, 'WITHSCORES')
    if #page == 0 then return end
    offset = offset + #page / 2
    for i = 1, #page, 2 do
      local score, p = tonumber(page[i + 1]), member_pos(page[i])
      while merge and ready[r] and (ready[r][1] < score or (ready[r][1] == score and ready[r][2] < p)) do
        visit(ready[r][3])
        r = r + 1
        if #out >= n then return end
      end
      local id = member_id(page[i])
      if id then visit(id) end
      if #out >= n then return end
    end
  end
end
walk(K_READY_DUE, true)
while #out < n and ready[r] do
  visit(ready[r][3])
  r = r + 1
end
walk(K_READY, false)
return out
