-- A real LSP client for `torch-tidy lsp`: Neovim's built-in one, headless.
-- Opens FILE, waits for torch-tidy's diagnostics, lists them and their code
-- actions, applies the preferred code action of the discarded result, saves (didSave re-checks) and waits for the
-- fixed diagnostic to clear. Prints what it saw; exits 1 on any failure.
--   nvim --headless --clean -c "luafile lsp_client.lua" -- TORCH_TIDY FILE FLAGS...
local args = vim.v.argv
local sep
for i, a in ipairs(args) do if a == '--' then sep = i end end
local tidy, file = args[sep + 1], args[sep + 2]
local cmd = { tidy, 'lsp', '--' }
for i = sep + 3, #args do table.insert(cmd, args[i]) end

local function fail(msg)
  io.stdout:write('FAIL: ' .. msg .. '\n')
  vim.cmd('cquit 1')
end

local client = vim.lsp.start_client({
  cmd = cmd,
  root_dir = vim.fn.fnamemodify(file, ':p:h'),
  name = 'torch-tidy',
})
if not client then fail('the server did not start') end
vim.cmd('edit ' .. file)
vim.lsp.buf_attach_client(0, client)

if not vim.wait(60000, function() return #vim.diagnostic.get(0) > 0 end, 50) then
  fail('no diagnostics after opening the file')
end
for _, d in ipairs(vim.diagnostic.get(0)) do
  io.stdout:write(string.format('diagnostic %d:%d %s [%s] %s\n', d.lnum + 1,
    d.col + 1, d.source or '', d.code or '', d.message))
  local related = d.user_data and d.user_data.lsp and d.user_data.lsp.relatedInformation or {}
  for _, r in ipairs(related) do
    io.stdout:write(string.format('  related %d: %s\n', r.location.range.start.line + 1, r.message))
  end
end

-- Every diagnostic's code actions: the safe fix-it preferred, an unsafe one
-- offered but not preferred.
for _, x in ipairs(vim.diagnostic.get(0)) do
  local p = {
    textDocument = { uri = vim.uri_from_bufnr(0) },
    range = { start = { line = x.lnum, character = 0 }, ['end'] = { line = x.lnum, character = 0 } },
    context = { diagnostics = {} },
  }
  for _, res in pairs(vim.lsp.buf_request_sync(0, 'textDocument/codeAction', p, 10000) or {}) do
    for _, a in ipairs(res.result or {}) do
      io.stdout:write(string.format('action %d: %s (%s)\n', x.lnum + 1, a.title,
        a.isPreferred and 'preferred' or 'not preferred'))
    end
  end
end

local before = #vim.diagnostic.get(0)
local d
for _, x in ipairs(vim.diagnostic.get(0)) do
  if x.code == 'torch-tensor-to-discarded' then d = x end
end
if not d then fail('no torch-tensor-to-discarded diagnostic') end
local params = {
  textDocument = { uri = vim.uri_from_bufnr(0) },
  range = { start = { line = d.lnum, character = 0 }, ['end'] = { line = d.lnum, character = 0 } },
  context = { diagnostics = {} },
}
local results = vim.lsp.buf_request_sync(0, 'textDocument/codeAction', params, 10000)
local action
for _, res in pairs(results or {}) do
  for _, a in ipairs(res.result or {}) do
    if a.isPreferred then action = a end
  end
end
if not action then fail('no preferred code action') end
io.stdout:write('code action: ' .. action.title .. '\n')
vim.lsp.util.apply_workspace_edit(action.edit, 'utf-16')
vim.cmd('write')

if not vim.wait(60000, function() return #vim.diagnostic.get(0) < before end, 50) then
  fail('the fixed diagnostic did not clear after the save')
end
io.stdout:write('after save: ' .. #vim.diagnostic.get(0) .. ' diagnostics\n')
vim.lsp.stop_client(client)
vim.cmd('qall!')
