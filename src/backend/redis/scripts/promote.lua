-- promote_due. ARGV: now. Returns how many moved.
return promote(clock_now())
