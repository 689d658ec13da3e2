-- post.lua plus a done() that prints one machine-readable line with p99.9 (wrk's --latency stops at 99%).
--   FRUGAL_WRK_SENTENCES=corpus.txt wrk -t 2 -c 64 -d 10s --latency -s post_latency.lua URL
-- With FRUGAL_WRK_CHECK=1 it also checks every response (slower): a 200 must be a list with one
-- embedding of 384 numbers; 429s and other statuses are counted apart.
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(dir .. "post.lua")

local check = os.getenv("FRUGAL_WRK_CHECK") == "1"
local threads = {}
local base_setup = setup
function setup(thread)
  base_setup(thread)
  threads[#threads + 1] = thread
end

ok_valid, ok_invalid, s429, s_other = 0, 0, 0, 0
if check then
  function response(status, headers, body)
    if status == 200 then
      local _, commas = body:gsub(",", ",")
      -- {"data":[{"embedding":[x1,...,x384],"index":0,"object":"embedding"}],"model":..,"object":..,"usage":{a,b}}
      if body:find('"embedding":%[') and body:find('"index":%s*0') and commas >= 383 then
        ok_valid = ok_valid + 1
      else
        ok_invalid = ok_invalid + 1
      end
    elseif status == 429 then
      s429 = s429 + 1
    else
      s_other = s_other + 1
    end
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  local line = string.format(
    "FRUGAL_WRK requests=%d duration_us=%d rps=%.1f p50_us=%d p99_us=%d p999_us=%d max_us=%d " ..
    "status_errors=%d connect=%d read=%d write=%d timeout=%d",
    summary.requests, summary.duration, summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.max,
    e.status, e.connect, e.read, e.write, e.timeout)
  if check then
    local v, iv, r, o = 0, 0, 0, 0
    for _, t in ipairs(threads) do
      v = v + t:get("ok_valid"); iv = iv + t:get("ok_invalid"); r = r + t:get("s429"); o = o + t:get("s_other")
    end
    line = line .. string.format(" ok_valid=%d ok_invalid=%d s429=%d s_other=%d", v, iv, r, o)
  end
  io.write(line .. "\n")
end
