-- touch, all or nothing. ARGV: now, then id, lease pairs.
-- Returns 0 when done, or the 1-based index of the first lost receipt.
local now = clock_now()
for i = 2, #ARGV - 1, 2 do
  if not current(ARGV[i], ARGV[i + 1]) then return (i / 2) end
end
for i = 2, #ARGV - 1, 2 do
  local id = ARGV[i]
  redis.call('HSET', item_key(id), 'ca', fmt(now))
  redis.call('ZADD', K_PENDING, now, pad(id))
end
return 0
