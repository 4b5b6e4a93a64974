-- Shared (`-- include: fair_keys.lua`): the per-tenant key names that scripts build from a
-- tenant they read, spelled as store/keys.py spells them (fair_waiting, tenant_running, and
-- fair_tenants / fair_passes / fair_vtime / fair_seq as fair_model_key(.., 'tenants') and so on).
-- emit.lua spells the usage counters as keys.usage_window / usage_total. The store tests read
-- what the scripts wrote through keys.py (tests/integration/test_fairness_store.py: the running
-- cap, a cancel while waiting, usage counted once), so a spelling that drifts fails there.
local function fair_waiting_key(fair_prefix, model, tenant)
  return fair_prefix .. model .. ':waiting:' .. tenant
end
local function tenant_running_key(running_prefix, tenant)
  return running_prefix .. tenant
end
local function fair_model_key(fair_prefix, model, what)
  return fair_prefix .. model .. ':' .. what
end
