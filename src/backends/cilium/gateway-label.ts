/**
 * The node label that makes a tunnel class's egress gateway policy select the gateway node.
 * egressguard sets it only while the tunnel is up and routable and removes it otherwise: with no
 * node matching the gateway selector, Cilium drops the class's traffic (DROP_NO_EGRESS_GATEWAY,
 * ../shared/reference/cilium/NOTES.md) instead of letting it leave by another device.
 * The compiler (the policy's nodeSelector) and the gateway resident (`run --k8s`) both use this
 * one function, so they cannot disagree on the key.
 */
export function gatewayLabel(tunnelClass: string): {
  readonly key: string;
  readonly value: string;
} {
  return { key: `egressguard.dev/gateway-${tunnelClass}`, value: 'up' };
}
