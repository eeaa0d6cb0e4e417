-- Argo CD health check for eventhub-balancer.dev/EventHubConsumer.
--
-- Install it under the key resource.customizations.health.eventhub-balancer.dev_EventHubConsumer
-- of the argocd-cm ConfigMap (docs/gitops.md). Argo CD runs it with gopher-lua (Lua 5.1), with
-- the object as the global `obj`; it must return {status = ..., message = ...}.
--
-- It reads the status the operator writes (docs/operator.md, "Status, conditions, events"):
--   Suspended    spec.paused took effect: Paused is True, no pod holds a partition.
--   Degraded     the consumer cannot process: Stalled is True (an invalid or overlapping spec,
--                a hub, consumer group, Secret or checkpoint store that cannot be used, every
--                partition failing), or some partitions are failing, parked or stuck.
--   Progressing  no status for this generation yet, or work that settles by itself:
--                Reconciling is True (hand-offs in flight, pods starting, a pause draining).
--   Healthy      every partition is owned by a Ready pod and the assignment is balanced.

local function condition(conditions, wanted)
  for _, c in ipairs(conditions) do
    if c.type == wanted then
      return c
    end
  end
  return nil
end

local function is_true(c)
  return c ~= nil and c.status == "True"
end

local function words(c, fallback)
  if c == nil then
    return fallback
  end
  if c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.reason
end

local hs = {}
local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator's first cycle"
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. generation
  return hs
end

local conditions = status.conditions
local paused = condition(conditions, "Paused")
local stalled = condition(conditions, "Stalled")
local failing = condition(conditions, "PartitionsFailing")
local reconciling = condition(conditions, "Reconciling")
local ready = condition(conditions, "Ready")
local balanced = condition(conditions, "Balanced")

if is_true(paused) then
  hs.status = "Suspended"
  hs.message = words(paused, "Paused")
elseif is_true(stalled) then
  hs.status = "Degraded"
  hs.message = words(stalled, "Stalled")
elseif is_true(failing) and failing.reason ~= "PartitionsLost" then
  -- A partition whose pod lost it to a newer owner is a hand-off, not a fault.
  hs.status = "Degraded"
  hs.message = words(failing, "PartitionsFailing")
elseif is_true(reconciling) then
  hs.status = "Progressing"
  hs.message = words(reconciling, "Reconciling")
elseif is_true(ready) and is_true(balanced) then
  hs.status = "Healthy"
  hs.message = words(balanced, "Balanced")
else
  -- An operator older than the Reconciling condition, or a state it does not name.
  hs.status = "Progressing"
  if ready ~= nil and not is_true(ready) then
    hs.message = words(ready, "Ready")
  else
    hs.message = words(balanced, "Waiting for Ready and Balanced")
  end
end
return hs
