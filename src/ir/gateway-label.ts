/**
 * The node label that makes a tunnel class's egress gateway policy select the gateway node.
 * egressguard sets it only while the tunnel is up and routable and removes it otherwise: with no
 * node matching the gateway selector, the pod network drops the class's traffic
 * (DROP_NO_EGRESS_GATEWAY) instead of letting it leave by another device.
 * The compiler (the policy's nodeSelector), explain (the pod kill switch node) and the gateway
 * resident (`run --k8s`) all use this one function, so they cannot disagree on the key.
 */
export function gatewayLabel(tunnelClass: string): {
  readonly key: string;
  readonly value: string;
} {
  return { key: `egressguard.dev/gateway-${tunnelClass}`, value: 'up' };
}
