-- forest's script prelude (crates/forest-server/src/cmd/script.rs): run once per Lua state,
-- before any user script. It builds the `redis` table and Redis's error handler, makes the
-- globals read-only as Redis 7 does, and returns the entry points the server calls:
-- run(f, keys, argv) and set_commands(call, pcall). Its arguments are Rust functions:
-- sha1hex(s), log(level, text), locate(), the source and line of the user's code that raised
-- the error being handled, and call_error(e), the {err=...} table of an error redis.call
-- raised (a Rust error value), or nil.
local sha1hex_raw, write_log, locate, call_error = ...

-- Redis's deny list: no files, no stdout. And no `newproxy`: its `__gc` finalizers would run
-- at a later collection, inside another client's script.
dofile, loadfile, print, newproxy = nil, nil, nil, nil

local type, tostring, error, select, setmetatable, rawget, rawset, pairs, setfenv, xpcall,
  pcall, loadstring, concat, sub, find, gsub =
  type, tostring, error, select, setmetatable, rawget, rawset, pairs, setfenv, xpcall,
  pcall, loadstring, table.concat, string.sub, string.find, string.gsub
local G = _G

-- An error reply as Lua sees it, from "-CODE message" or "message" (code ERR), as Redis's
-- luaPushErrorBuff builds it.
local function error_table(text)
  local code, message = 'ERR', text
  if sub(text, 1, 1) == '-' then
    local space = find(text, ' ', 1, true)
    if space then
      code, message = sub(text, 2, space - 1), sub(text, space + 1)
    else
      message = sub(text, 2)
    end
  end
  message = gsub(gsub(message, '^[\r\n]+', ''), '[\r\n]+$', '')
  return {err = code .. ' ' .. message}
end

-- An error as Redis 7 raises it: redis.call's as its {err=...} table.
local function as_table(err)
  if type(err) == 'userdata' then
    local t = call_error(err)
    if t then
      return t
    end
  end
  return err
end

-- Redis's error handler: every error becomes {err=, source=, line=}, naming the line of the
-- user's script where it happened.
local function handler(err)
  err = as_table(err)
  if type(err) ~= 'table' then
    err = {err = 'ERR ' .. tostring(err)}
  end
  local source, line = locate()
  if source then
    err.source, err.line = source, line
  end
  return err
end

-- redis.call and redis.pcall are the running script's (scoped Rust functions, C functions
-- to Lua: a tail call to one keeps the caller's frame, so errors name the caller's line).
local redis = {}
redis.sha1hex = function(...)
  if select('#', ...) ~= 1 then
    error(error_table('wrong number of arguments'), 0)
  end
  local s = ...
  if type(s) == 'number' then
    s = tostring(s)
  elseif type(s) ~= 'string' then
    s = ''
  end
  return sha1hex_raw(s)
end
redis.error_reply = function(...)
  local text = ...
  if select('#', ...) ~= 1 or type(text) ~= 'string' then
    return error_table('wrong number or type of arguments')
  end
  if sub(text, 1, 1) ~= '-' then
    text = '-' .. text
  end
  return error_table(text)
end
redis.status_reply = function(...)
  local text = ...
  if select('#', ...) ~= 1 or type(text) ~= 'string' then
    return error_table('wrong number or type of arguments')
  end
  return {ok = text}
end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.log = function(...)
  local n = select('#', ...)
  if n < 2 then
    error(error_table('redis.log() requires two arguments or more.'), 0)
  end
  local level = ...
  if type(level) ~= 'number' then
    error(error_table('First argument must be a number (log level).'), 0)
  end
  if level < 0 or level > 3 then
    error(error_table('Invalid log level.'), 0)
  end
  local parts = {}
  for i = 2, n do
    local part = select(i, ...)
    if type(part) == 'string' or type(part) == 'number' then
      parts[#parts + 1] = tostring(part)
    end
  end
  write_log(level, concat(parts, ' '))
end
-- Replication does not exist in forest: accepted and ignored.
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
redis.replicate_commands = function()
  return true
end
redis.set_repl = function(...)
  if select('#', ...) ~= 1 then
    error(error_table('redis.set_repl() requires one argument.'), 0)
  end
  local flags = ...
  if type(flags) ~= 'number' or flags < 0 or flags > 3 then
    error(error_table('Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.'), 0)
  end
end
redis.setresp = function(...)
  if select('#', ...) ~= 1 then
    error(error_table('redis.setresp() requires one argument.'), 0)
  end
  local resp = ...
  if resp == 3 then
    error(error_table('forest runs scripts in RESP2 only; redis.setresp(3) is not supported.'), 0)
  end
  if resp ~= 2 then
    error(error_table('RESP version must be 2 or 3.'), 0)
  end
end
redis.REDIS_VERSION, redis.REDIS_VERSION_NUM = '7.2.0', 0x070200

-- Redis's pcall: an error table from redis.call comes back as its message.
local function unwrap(ok, ...)
  if ok then
    return true, ...
  end
  local e = as_table((...))
  if type(e) == 'table' then
    local text = rawget(e, 'err')
    if type(text) == 'string' or type(text) == 'number' then
      return false, text
    end
  end
  return false, e
end
G.pcall = function(...)
  return unwrap(pcall(...))
end
G.xpcall = function(f, h)
  return xpcall(f, function(e)
    return h(as_table(e))
  end)
end

-- No bytecode: a crafted binary chunk can crash Lua 5.1.
G.loadstring = function(s, name)
  if type(s) == 'string' and sub(s, 1, 1) == '\27' then
    return nil, 'binary chunks are not allowed'
  end
  return loadstring(s, name)
end
G.load = function(reader, name)
  local parts = {}
  while true do
    local part = reader()
    if part == nil or part == '' then
      break
    end
    if type(part) ~= 'string' then
      return nil, 'reader function must return a string'
    end
    parts[#parts + 1] = part
  end
  return G.loadstring(concat(parts), name)
end
-- A thread's environment is every later script's globals: not to be replaced.
G.setfenv = function(f, t)
  if f == 0 or type(f) == 'thread' then
    error("'setfenv' cannot change the environment of a thread", 2)
  end
  if type(f) == 'number' then
    f = f + 1
  end
  local result = setfenv(f, t)
  return result
end

-- Read-only globals: the real ones move to `base`; the globals table stays empty, reads go
-- to `base` (an unknown name is an error, as Redis), writes fail. Library tables are seen
-- through read-only proxies, so no script can change what the next one runs.
local base = {}
for k, v in pairs(G) do
  base[k] = v
end
local protected = setmetatable({}, {__mode = 'k'})
local function readonly_error()
  error('Attempt to modify a readonly table', 2)
end
local function proxy(t)
  local p = setmetatable({}, {__index = t, __newindex = readonly_error, __metatable = false})
  protected[p] = true
  return p
end
for _, name in pairs({'string', 'table', 'math', 'coroutine'}) do
  base[name] = proxy(base[name])
end
base.redis = proxy(redis)
base._G = G
base.rawset = function(t, k, v)
  if protected[t] then
    error('Attempt to modify a readonly table', 2)
  end
  return rawset(t, k, v)
end
local string_meta = getmetatable('')
string_meta.__metatable = false
for k in pairs(base) do
  rawset(G, k, nil)
end
protected[G] = true
setmetatable(G, {
  __index = function(_, k)
    local v = base[k]
    if v == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 0)
    end
    return v
  end,
  __newindex = readonly_error,
  __metatable = false,
})

local function run(f, keys, argv)
  base.KEYS, base.ARGV = keys, argv
  setfenv(f, G)
  return xpcall(f, handler)
end

local function set_commands(call, pcall_)
  redis.call, redis.pcall = call, pcall_
end

return run, set_commands
