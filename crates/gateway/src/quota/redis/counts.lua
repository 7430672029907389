-- The limits' counts (crates/gateway/src/quota/redis.rs): settlements, then reservations,
-- at one moment of Redis's clock, in one atomic call.
--
-- KEYS: the settled counters, then each reservation's counters in turn.
-- ARGV[1]: a MessagePack array of numbers (Redis reads them far faster than decimal
-- strings): [1] the settlements' count; [2] the reservations' count R; [3 .. 2 + R] each
-- reservation's counters' count; then 4 numbers a settlement (its window's start, the
-- window's length, what it held, what it used), then 4 a charge (the window's length, the
-- limit, the amount, what of it is held).
--
-- Returns one verdict a reservation, in order: {1, now, start, amount, start, amount...}
-- (each counter's window as the charge left it), or {0, index, reset_ms, used, in_flight}
-- for the first of its counters that would pass its limit (`in_flight` 1 when the settled
-- amount alone would have let it pass); a refused reservation charges nothing, and the
-- next is checked as if it had not come.
--
-- A counter is a hash of its window's start (`s`), the amount charged in it (`v`) and the
-- part of that held by requests in flight (`h`), expiring a second after its window ends.
-- The rule is the in-process store's (store.rs). A call reads each counter it names once
-- and writes each one it changed once, however many settlements and charges name it: a
-- `redis.call` costs Redis more than the command itself (docs/benchmarks.md). The counts
-- are Lua numbers (doubles), exact since a limit is at most 2^53; they are written with
-- '%d', never rounded to `tostring`'s 14 digits.

local n = cmsgpack.unpack(ARGV[1])
local settles = n[1]
local reservations = n[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Each counter read: seen[key] = {start or nil, amount, held, changed, expiry or false};
-- seen[1..] the keys in the order first read.
local seen = {}
local function read(key)
  local c = seen[key]
  if c == nil then
    local got = redis.call('HMGET', key, 's', 'v', 'h')
    c = {tonumber(got[1]), tonumber(got[2]) or 0, tonumber(got[3]) or 0, false, false}
    seen[key] = c
    seen[#seen + 1] = key
  end
  return c
end

-- A window begun at `now` of length `w`, holding `amount`, `held` of it in flight.
local function begin(c, w, amount, held)
  c[1] = now
  c[2] = amount
  c[3] = held
  c[4] = true
  c[5] = now + w + 1000
end

for i = 1, settles do
  local c = read(KEYS[i])
  local a = 2 + reservations + 4 * (i - 1)
  local start = n[a + 1]
  local w = n[a + 2]
  local held = n[a + 3]
  local used = n[a + 4]
  local s = c[1]
  if s ~= nil and now < s + w then
    if s == start then
      c[2] = math.max(c[2] + used - held, 0)
      c[3] = math.max(c[3] - held, 0)
    else
      c[2] = c[2] + used
    end
    c[4] = true
  elseif used ~= 0 then
    begin(c, w, used, 0)
  end
end

local out = {}
local key = settles
local a = 2 + reservations + 4 * settles
for r = 1, reservations do
  local count = n[2 + r]
  local refused = nil
  for i = 1, count do
    local c = read(KEYS[key + i])
    local b = a + 4 * (i - 1)
    local w = n[b + 1]
    local limit = n[b + 2]
    local amount = n[b + 3]
    local s, used, held = c[1], c[2], c[3]
    if s == nil or now >= s + w then
      s = now
      used = 0
      held = 0
    end
    if used + amount > limit then
      local in_flight = 0
      if used - held + amount <= limit then
        in_flight = 1
      end
      refused = {0, i - 1, s + w - now, used, in_flight}
      break
    end
  end
  if refused == nil then
    local verdict = {1, now}
    for i = 1, count do
      local c = seen[KEYS[key + i]]
      local b = a + 4 * (i - 1)
      local w = n[b + 1]
      local amount = n[b + 3]
      local hold = n[b + 4]
      if c[1] == nil or now >= c[1] + w then
        begin(c, w, amount, hold)
      else
        c[2] = c[2] + amount
        c[3] = c[3] + hold
        c[4] = true
      end
      verdict[2 * i + 1] = c[1]
      verdict[2 * i + 2] = c[2]
    end
    out[r] = verdict
  else
    out[r] = refused
  end
  key = key + count
  a = a + 4 * count
end

for i = 1, #seen do
  local k = seen[i]
  local c = seen[k]
  if c[4] then
    local v, h = string.format('%d', c[2]), string.format('%d', c[3])
    if c[5] then
      redis.call('HSET', k, 's', string.format('%d', c[1]), 'v', v, 'h', h)
      redis.call('PEXPIREAT', k, string.format('%d', c[5]))
    else
      redis.call('HSET', k, 'v', v, 'h', h)
    end
  end
end
return out
