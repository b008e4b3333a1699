-- touch, all or nothing. ARGV: now, then id, lease pairs.
-- Returns 0 when done, or the 1-based index of the first lost receipt.
local now = clock_now()
for i = 2, #ARGV - 1, 2 do
  if not current(ARGV[i], ARGV[i + 1]) then return (i / 2) end
end
-- The pending set's score is the last touch; the item's `ca` stays the
-- claim time (SPEC 3, Looking).
for i = 2, #ARGV - 1, 2 do
  redis.call('ZADD', K_PENDING, now, pad(ARGV[i]))
end
return 0
