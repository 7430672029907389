-- The limits' counts (crates/gateway/src/quota/redis.rs): settlements, then reservations,
-- at one moment of Redis's clock, in one atomic call.
--
-- KEYS: the counters the call names, each once.
-- ARGV[1]: a MessagePack array of numbers (Redis reads them far faster than decimal
-- strings): [1] the settlements' count; [2] the reservations' count; then 5 numbers a
-- settlement (its counter's place in KEYS, its window's start, the window's length, what it
-- held, what it used); then each reservation: its charges' count, then 5 numbers a charge
-- (its counter's place in KEYS, the window's length, the limit, the amount, what of it is
-- held).
--
-- Returns one MessagePack array, each reservation's verdict in turn: 1, now, then each counter's
-- window as the charge left it (start, amount); or 0, index, reset_ms, used, in_flight for
-- the first of its counters that would pass its limit (`in_flight` 1 when the settled
-- amount alone would have let it pass). A refused reservation charges nothing, and the
-- next is checked as if it had not come.
--
-- A counter is a hash of its window's start (`s`), the amount charged in it (`v`) and the
-- part of that held by requests in flight (`h`), expiring a second after its window ends.
-- The rule is the in-process store's (store.rs). A call reads each counter once and writes
-- each one it changed once, however many settlements and charges name it: a `redis.call`
-- costs Redis more than the command itself, a key more than a number, and a nested
-- answer more than a flat one; a packed answer costs Redis no more than an array of
-- integers, and the gateway far less to read (docs/benchmarks.md). The counts are Lua numbers (doubles),
-- exact since a limit is at most 2^53; they are written with '%d', never rounded to
-- `tostring`'s 14 digits.

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

local a = 3
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

local out, o = {}, 0
for _ = 1, n[2] do
  local count = n[a]
  a = a + 1
  local refused = false
  local b = a
  for i = 1, count do
    local k, w, limit, amount = n[b], n[b + 1], n[b + 2], n[b + 3]
    local s, used, held = S[k], V[k], H[k]
    if not s or now >= s + w then
      s, used, held = now, 0, 0
    end
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
      local s = S[k]
      if not s or now >= s + w then
        begin(k, w, amount, hold)
      else
        V[k] = V[k] + amount
        H[k] = H[k] + hold
        changed[k] = true
      end
      out[o + 1], out[o + 2] = S[k], V[k]
      o = o + 2
      b = b + 5
    end
  end
  a = a + 5 * count
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
