-- wrk -s bench/wrk/chat_json.lua http://127.0.0.1:PORT
-- POST /v1/chat/completions with a ~1 KB chat body, "stream":false (one JSON response).
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local chat = require("chat_body")

wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.body = chat.body(false)
