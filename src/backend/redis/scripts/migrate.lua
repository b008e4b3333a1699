-- At connect: move a namespace written with the stream layout (schema 1:
-- the ready lanes were the streams {ns}:backlog and {ns}:due, read by a
-- consumer group) to the ranked sorted sets, in one script, so that no
-- client sees it half moved. Entries of items still ready go to their lane
-- in stream order, arriving at their enq (backlog) or nb (due lane), raised
-- to the arrival before them, at tier 0; entries of pending items are
-- dropped (the pending index holds those). ARGV: now (unused).
-- Returns how many items moved, or {"refused", layout} (nothing done)
-- for a namespace whose `{ns}:layout` is above LAYOUT (a newer build wrote
-- it) or is not a number; records LAYOUT in `{ns}:layout` otherwise
-- (SPEC 6).
local raw = redis.call('GET', K_LAYOUT)
local found = 0
if raw then found = tonumber(raw) end
if not found or found > LAYOUT then return { 'refused', raw } end
local moved = 0
for _, lane in ipairs({ { K_BACKLOG, K_READY, 'backlog' }, { K_DUE, K_READY_DUE, 'due' } }) do
  local stream, zset, field = lane[1], lane[2], lane[3]
  local t = redis.call('TYPE', stream)
  if type(t) == 'table' then t = t.ok end
  if t == 'stream' then
    local from = '-'
    while true do
      local page = redis.call('XRANGE', stream, from, '+', 'COUNT', 500)
      if #page == 0 then break end
      for _, e in ipairs(page) do
        from = '(' .. e[1]
        local id = entry_field(e[2], 'id')
        if id then
          local f = redis.call('HMGET', item_key(id), 'st', 'enq', 'nb')
          if f[1] == field then
            local at = tonumber(f[2] or '0')
            if field == 'due' and f[3] then at = tonumber(f[3]) end
            enqueue(zset, field, id, at)
            moved = moved + 1
          end
          redis.call('HDEL', item_key(id), 'sid')
        end
      end
    end
    redis.call('DEL', stream)
  end
end
if found < LAYOUT then redis.call('SET', K_LAYOUT, fmt(LAYOUT)) end
return moved
