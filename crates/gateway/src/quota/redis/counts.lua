-- The limits' counts (crates/gateway/src/quota/redis.rs): settlements, then reservations,
-- at one moment of Redis's clock, in one atomic call.
--
-- KEYS: the counters the call names, each once.
-- ARGV[1]: a MessagePack array of numbers (Redis reads them far faster than decimal
-- strings): [1] the settlements' count; [2] the sums' count; [3] 1 when the sums may stand
-- for the reservations (each counter charged with one window and one limit), else 0; then
-- 5 numbers a settlement (its counter's place in KEYS, its window's start, the window's
-- length, what it held, what it used); then 5 a sum, the reservations' charges of one
-- counter added (its place, the window's length, the limit, the amount, what of it is
-- held).
-- ARGV[2]: the reservations one by one, as MessagePack: [1] their count; then each
-- reservation's charges' count, then 5 numbers a charge (as a sum's). Read only when the
-- sums do not all fit.
--
-- When every sum fits its limit, so does every reservation, each after the ones before it:
-- all are charged, and the answer is 1, now, then each sum's counter's window (its start
-- and its amount before the call's charges), from which the caller finds each
-- reservation's. Otherwise the reservations are checked in turn, and the answer is 0, then
-- each one's verdict: 1, now, then each counter's window as its charge left it (start,
-- amount); or 0, index, reset_ms, used, in_flight for the first of its counters that would
-- pass its limit (`in_flight` 1 when the settled amount alone would have let it pass). A
-- refused reservation charges nothing, and the next is checked as if it had not come.
--
-- A counter is a hash of its window's start (`s`), the amount charged in it (`v`) and the
-- part of that held by requests in flight (`h`), expiring a second after its window ends.
-- The rule is the in-process store's (store.rs). A call reads each counter once and writes
-- each one it changed once, however many settlements and charges name it: a `redis.call`
-- costs Redis more than the command itself, a key more than a number, a nested answer more
-- than a packed one, and a reservation checked on its own far more than its share of a sum
-- (docs/benchmarks.md). The counts are Lua numbers (doubles), exact since a limit is at
-- most 2^53; they are written with '%d', never rounded to `tostring`'s 14 digits.

local n = cmsgpack.unpack(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Each counter by its place in KEYS: its window's start (false for none), amount and held
-- part, whether the call changed it, and its new expiry (false to keep the one it has).
local S, V, H, changed, expiry = {}, {}, {}, {}, {}
for k = 1, #KEYS do
  local got = redis.call('HMGET', KEYS[k], 's', 'v', 'h')
  S[k] = tonumber(got[1]) or false
  V[k] = tonumber(got[2]) or 0
  H[k] = tonumber(got[3]) or 0
  changed[k] = false
  expiry[k] = false
end

-- Counter `k`'s window begun at `now`, of length `w`, holding `amount`, `held` of it in
-- flight.
local function begin(k, w, amount, held)
  S[k] = now
  V[k] = amount
  H[k] = held
  changed[k] = true
  expiry[k] = now + w + 1000
end

-- Counter `k`'s window of length `w` as a charge finds it now: its start, amount and held
-- part, or a window beginning now (and true) where none runs.
local function window(k, w)
  local s = S[k]
  if not s or now >= s + w then
    return now, 0, 0, true
  end
  return s, V[k], H[k], false
end

-- `amount` charged to counter `k` (window `w`), `hold` of it held.
local function charge(k, w, amount, hold)
  local _, used, held, fresh = window(k, w)
  if fresh then
    begin(k, w, amount, hold)
  else
    V[k] = used + amount
    H[k] = held + hold
    changed[k] = true
  end
end

local a = 4
for _ = 1, n[1] do
  local k, start, w, held, used = n[a], n[a + 1], n[a + 2], n[a + 3], n[a + 4]
  local s = S[k]
  if s and now < s + w then
    if s == start then
      V[k] = math.max(V[k] + used - held, 0)
      H[k] = math.max(H[k] - held, 0)
    else
      V[k] = V[k] + used
    end
    changed[k] = true
  elseif used ~= 0 then
    begin(k, w, used, 0)
  end
  a = a + 5
end

-- Whether every sum fits its limit.
local fits = n[3] == 1
local b = a
for _ = 1, n[2] do
  if not fits then
    break
  end
  local k, w, limit, amount = n[b], n[b + 1], n[b + 2], n[b + 3]
  local _, used = window(k, w)
  fits = used + amount <= limit
  b = b + 5
end

local out, o
if fits then
  out, o = {1, now}, 2
  b = a
  for _ = 1, n[2] do
    local k, w, amount, hold = n[b], n[b + 1], n[b + 3], n[b + 4]
    out[o + 1], out[o + 2] = window(k, w)
    charge(k, w, amount, hold)
    o = o + 2
    b = b + 5
  end
else
  n = cmsgpack.unpack(ARGV[2])
  out, o = {0}, 1
  a = 2
  for _ = 1, n[1] do
    local count = n[a]
    a = a + 1
    local refused = false
    b = a
    for i = 1, count do
      local k, w, limit, amount = n[b], n[b + 1], n[b + 2], n[b + 3]
      local s, used, held = window(k, w)
      if used + amount > limit then
        local in_flight = 0
        if used - held + amount <= limit then
          in_flight = 1
        end
        out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] =
          0, i - 1, s + w - now, used, in_flight
        o = o + 5
        refused = true
        break
      end
      b = b + 5
    end
    if not refused then
      out[o + 1], out[o + 2] = 1, now
      o = o + 2
      b = a
      for _ = 1, count do
        local k, w, amount, hold = n[b], n[b + 1], n[b + 3], n[b + 4]
        charge(k, w, amount, hold)
        out[o + 1], out[o + 2] = S[k], V[k]
        o = o + 2
        b = b + 5
      end
    end
    a = a + 5 * count
  end
end

for k = 1, #KEYS do
  if changed[k] then
    local v, h = string.format('%d', V[k]), string.format('%d', H[k])
    if expiry[k] then
      redis.call('HSET', KEYS[k], 's', string.format('%d', S[k]), 'v', v, 'h', h)
      redis.call('PEXPIREAT', KEYS[k], string.format('%d', expiry[k]))
    else
      redis.call('HSET', KEYS[k], 'v', v, 'h', h)
    end
  end
end
return cmsgpack.pack(out)
