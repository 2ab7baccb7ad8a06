// Preloaded (node --require) into a peer gateway the benches start: every server it opens listens on
// 127.0.0.1 only. Portkey's start-server listens on all interfaces, with no option to say otherwise, and
// nothing a bench starts may open an unauthenticated port beyond this machine.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (args[0] !== null && typeof args[0] === "object") {
    args[0] = { ...args[0], host: "127.0.0.1" };
    return listen.apply(this, args);
  }
  // listen(port[, host][, backlog][, callback]): keep the port and the callback, force the host.
  const done = args.find((arg) => typeof arg === "function");
  return listen.call(this, { port: Number(args[0]) || 0, host: "127.0.0.1" }, done);
};
