// The label is an IR fact (the pod kill switch node names it), so `explain` and every backend
// read it from one place; the compiler and the gateway resident import it from here.
export { gatewayLabel } from '../../ir/index.js';
