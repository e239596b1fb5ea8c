-- wrk -s bench/wrk/chat_sse.lua http://127.0.0.1:PORT
-- POST /v1/chat/completions with a ~1 KB chat body, "stream":true (SSE, chunked). wrk counts a
-- request when the terminating zero-length chunk arrives, so latency is time to the last event.
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local chat = require("chat_body")

wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "text/event-stream"
wrk.body = chat.body(true)
