export { ciliumClusterSupport } from './cluster-support.js';
