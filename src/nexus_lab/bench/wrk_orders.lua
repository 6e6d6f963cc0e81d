-- wrk script of `nexus bench --suite wrk` and of the numbered-steps benchmark (nexus_lab.bench.mcp_steps):
-- one step per request. Run with one connection per thread (-t N -c N): a thread's Lua state is then one
-- connection, and wrk asks it for its next request only once the previous answer arrived, so each connection
-- sends its own orders' steps in order (order 0 seq 1..5, then order 1, ...), as an agent does.
-- The step advances in response(), not in request(): wrk calls request() once more than it sends (to
-- check the script, on the first thread), and a request lost to a reconnect is sent again (same event_id or
-- idempotency key, which the gateway answers DUPLICATE if it had applied it).
-- Modes: "events" (the default), POST /v1/events, the client numbering its steps (order_id wrk-<run>-<thread>-<n>);
-- "rest", POST /v1/orders/{id}/steps, and "mcp", POST /mcp (a JSON-RPC tools/call of propose_step): the
-- gateway numbers the step (plans made beforehand: order_id <run>-<thread>-<n>).
-- Arguments (after --): run id (8 hex digits), Authorization header value or "", the order process's
-- steps in order, comma-separated (bench/wrk.py reads them from the definition, processes/order.yaml), mode.

local STEPS = {}
local threads = {}
local counter = 0
local run = "00000000"
local mode = "events"
local rpc_id = 0

function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_id", #threads)
end

function init(args)
  run = args[1] or run
  mode = args[4] or mode
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  if mode ~= "events" then
    wrk.headers["Accept"] = "application/json, text/event-stream"
  end
  if args[2] ~= nil and args[2] ~= "" then
    wrk.headers["Authorization"] = args[2]
  end
  for name in string.gmatch(args[3] or "", "[^,]+") do
    table.insert(STEPS, name)
  end
end

local ITEMS = '[{"product_id":"prod_a","quantity":2,"unit_price":"3.50"},' ..
  '{"product_id":"prod_b","quantity":1,"unit_price":"3.00"}]'
DATA = {
  [1] = '{"user_id":"u1","items":' .. ITEMS .. ',"total_amount":"10.00","currency":"USD"}',
  [2] = '{"warehouse_id":"wh","reserved_items":' .. ITEMS .. '}',
  [3] = '{"payment_id":"pay","amount":"10.00","currency":"USD"}',
}

function request()
  local order = math.floor(counter / #STEPS)
  local seq = counter % #STEPS + 1
  -- The same honest data as the bench's Python plans (bench/scenarios.py _BENCH_DATA): it passes the
  -- built-in order process's checks (total = items, reserved = items, payment = total and currency).
  local data = DATA[seq] or "{}"
  if mode == "events" then
    local order_id = string.format("wrk-%s-%d-%d", run, thread_id, order)
    local event_id = string.format("%s-%04x-4000-8000-%012x", run, thread_id, counter + 1)
    local body = string.format(
      '{"event_id":"%s","event_type":"%s","plan_id":"%s-plan","order_id":"%s","seq_id":%d,' ..
      '"timestamp":"%s","schema_version":"1.0","data":%s}',
      event_id, STEPS[seq], order_id, order_id, seq, os.date("!%Y-%m-%dT%H:%M:%SZ"), data)
    return wrk.format(nil, "/v1/events", nil, body)
  end
  local order_id = string.format("%s-%d-%d", run, thread_id, order)
  if mode == "mcp" then
    rpc_id = rpc_id + 1
    local step = string.format('{"order_id":"%s","step":"%s","data":%s,"idempotency_key":"k%d"}',
      order_id, STEPS[seq], data, seq)
    local body = string.format(
      '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"propose_step","arguments":%s}}',
      rpc_id, step)
    return wrk.format(nil, "/mcp", nil, body)
  end
  local body = string.format('{"step":"%s","data":%s,"idempotency_key":"k%d"}', STEPS[seq], data, seq)
  return wrk.format(nil, "/v1/orders/" .. order_id .. "/steps", nil, body)
end

-- A refusal that decided nothing (429 RATE_LIMITED, 503 with Retry-After) leaves the step where it was: it is
-- sent again after the Retry-After the gateway asked for, as an agent would. Advancing past it would send
-- the order's next step ahead of a gap that never fills (each BUFFERed, none applied).
local wait_ms = 0

function response(status, headers, body)
  if status == 429 or status == 503 then
    wait_ms = 1000 * (tonumber(headers["Retry-After"] or headers["retry-after"] or "1") or 1)
    return
  end
  wait_ms = 0
  counter = counter + 1
end

function delay()
  return wait_ms
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'NEXUS_WRK {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"mean_us":%.1f,' ..
    '"connect_errors":%d,"read_errors":%d,"write_errors":%d,"status_errors":%d,"timeouts":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.mean,
    e.connect, e.read, e.write, e.status, e.timeout))
end
