-- A counter (a discovery seq, forced_seq) as 8 bytes, big-endian: frontier members
-- and forced-queue tokens sort by it as bytes.
local TWO32 = 4294967296

local function seq8(n)
  return struct.pack('>I4I4', math.floor(n / TWO32), n % TWO32)
end
