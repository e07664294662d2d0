-- wrk script: POST /api/request_task, each call from a fresh worker (a new unique key, so a
-- new worker name), counting the replies: a task, "too busy", or anything else.
-- Used by benches/wrk/request_task.sh (see BENCHMARKS.md, "request_task under wrk").
-- Environment: SHOAL_WRK_USER, SHOAL_WRK_PASSWORD.

local threads = {}
local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

function init(args)
  user = os.getenv("SHOAL_WRK_USER") or "wrk"
  password = os.getenv("SHOAL_WRK_PASSWORD") or "wrk-password"
  counter = 0
  tasks = 0
  busy = 0
  other = 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  counter = counter + 1
  -- The first group of the key is the worker name's distinctive part: 2 hex digits of the
  -- thread, 6 of the counter.
  local key = string.format("%02x%06x-1111-4222-8333-%012x", id, counter % 0x1000000, counter)
  local body = string.format(
    '{"password":"%s","worker_info":{"uname":"Linux 6.1","architecture":["64bit","ELF"],' ..
    '"concurrency":1,"max_memory":8000,"min_threads":1,"username":"%s","version":325,' ..
    '"python_version":[3,11,7],"gcc_version":[12,2,0],"compiler":"g++","unique_key":"%s",' ..
    '"modified":false,"worker_arch":"x86-64-avx2","ARCH":"?","nps":1000000.0,' ..
    '"near_github_api_limit":false}}', password, user, key)
  return wrk.format(nil, "/api/request_task", nil, body)
end

function response(status, headers, body)
  if status == 200 and string.find(body, '"task_id"', 1, true) then
    tasks = tasks + 1
  elseif string.find(body, "too busy", 1, true) then
    busy = busy + 1
  else
    other = other + 1
    if other <= 3 then
      io.stderr:write("unexpected reply " .. status .. ": " .. string.sub(body, 1, 200) .. "\n")
    end
  end
end

function done(summary, latency, requests)
  local t, b, o = 0, 0, 0
  for _, thread in ipairs(threads) do
    t = t + thread:get("tasks")
    b = b + thread:get("busy")
    o = o + thread:get("other")
  end
  local calls = t + b + o
  local secs = summary.duration / 1e6
  io.write(string.format("replies: %d calls, %d tasks, %d too busy, %d other\n", calls, t, b, o))
  io.write(string.format("assigned/s: %.0f\n", t / secs))
  if calls > 0 then
    io.write(string.format("too busy: %.2f %%\n", 100 * b / calls))
  end
  io.write(string.format("latency p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
