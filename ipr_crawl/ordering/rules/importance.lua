--! include _rules.lua
-- importance (Matsuoka et al., §2), twin: importance.py: at p's first fetch
-- f = log2(a * same-site + b * other-site links + 1); every target j gets
-- X(j) += (c if same site else d) * f (the record's tie is the site hash).
RULES.importance = {}
function RULES.importance.first(p, n, P, lties)
  local same = 0
  for k = 0, n - 1 do
    if lties[k + 1] == p.tie then same = same + 1 end
  end
  local f = math.log(P.ia * same + P.ib * (n - same) + 1) / math.log(2)
  local same_share, other_share = P.ic * f, P.id * f
  return 0, function(ttie)
    if ttie == p.tie then return same_share end
    return other_share
  end
end
