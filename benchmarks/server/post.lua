-- wrk script: POST /v1/embeddings with one sentence per request, drawn Zipf (s = 1) from the lines of
-- the file named by FRUGAL_WRK_SENTENCES, so popular sentences repeat as real traffic does.
--   FRUGAL_WRK_SENTENCES=corpus.txt wrk -t 2 -c 64 -d 30s -s post.lua http://127.0.0.1:8080/v1/embeddings
local path = os.getenv("FRUGAL_WRK_SENTENCES")
local model = os.getenv("FRUGAL_WRK_MODEL") or "all-MiniLM-L6-v2"
local bodies, cdf = {}, {}

local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    if c == '"' then return '\\"' elseif c == '\\' then return '\\\\' end
    return string.format("\\u%04x", c:byte())
  end) .. '"'
end

local f = assert(io.open(path or "", "r"), "set FRUGAL_WRK_SENTENCES to a file of sentences")
for line in f:lines() do
  if #line > 0 then
    bodies[#bodies + 1] = '{"model":"' .. model .. '","input":' .. json_string(line) .. '}'
  end
end
f:close()
assert(#bodies > 0, "no sentences in " .. path)
local sum = 0
for i = 1, #bodies do
  sum = sum + 1 / i
  cdf[i] = sum
end
for i = 1, #bodies do cdf[i] = cdf[i] / sum end

function setup(thread)
  thread:set("seed", math.random(1, 1000000))
end

function init(args)
  math.randomseed(seed or 1)
end

function request()
  local u, lo, hi = math.random(), 1, #cdf
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if cdf[mid] < u then lo = mid + 1 else hi = mid end
  end
  return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, bodies[lo])
end
