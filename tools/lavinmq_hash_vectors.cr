# Test vectors for the consistent-hash exchange, made by LavinMQ's own
# hashers: which destination each key lands on, after a series of adds and
# removes, for the ring and the jump algorithm. The broker's matcher
# (lavinmq/_core/_match_chash.pxi) must give the same answers:
# tests/unit/test_routing.py reads the output, kept as
# tests/fixtures/lavinmq-consistent-hash-vectors.json.
#
# To make it again (Debian's crystal 1.6 is enough; ~10 s):
#   git -C LAVINMQ show HEAD:src/lavinmq/hasher.cr > hasher.cr   (and the same
#   for consistent_hasher.cr and jump_consistent_hasher.cr, next to this file)
#   crystal run tools/lavinmq_hash_vectors.cr > tests/fixtures/lavinmq-consistent-hash-vectors.json
require "json"
require "./hasher"
require "./consistent_hasher"
require "./jump_consistent_hasher"

def run(h, ops, keys)
  ops.each do |op|
    if op[0] == "add"
      h.add(op[1], op[2].to_u32, op[1])
    else
      h.remove(op[1], op[2].to_u32)
    end
  end
  keys.map { |k| h.get(k) }
end

keys = (0...400).map { |i| "key-#{i}" } + ["", "r1", "r2", "r3", "a", "zzz", "\u00e5\u00e4\u00f6"]
scenarios = {
  "three_of_3" => [{"add", "1", 3}, {"add", "2", 3}, {"add", "3", 3}],
  "weights" => [{"add", "orders.1", 1}, {"add", "orders.2", 5}, {"add", "q-a", 2}, {"add", "\u00e5", 7}],
  "removed" => [{"add", "a", 4}, {"add", "b", 4}, {"add", "c", 4}, {"remove", "b", 4}],
  "readd_then_remove" => [{"add", "q", 2}, {"add", "p", 3}, {"add", "q", 1}, {"remove", "q", 1}],
  "readd_order" => [{"add", "x", 2}, {"add", "y", 2}, {"remove", "x", 2}, {"add", "x", 2}],
  "single" => [{"add", "only", 1}],
  "zero" => [{"add", "none", 0}, {"add", "one", 1}],
  "many" => (0...50).map { |i| {"add", "queue-#{i}", (i % 7 + 1)} },
}
out = {} of String => Hash(String, Array(String?))
scenarios.each do |name, ops|
  out[name] = {
    "ring" => run(RingConsistentHasher(String).new, ops, keys),
    "jump" => run(JumpConsistentHasher(String).new, ops, keys),
  }
end
puts({"keys" => keys, "scenarios" => scenarios.transform_values { |ops| ops.map(&.to_a) }, "results" => out}.to_json)
