import { runDatapathContract } from '../testing/contract.js';
import { FakeDatapath } from './fakeDatapath.js';

let n = 0;

runDatapathContract('fake', async () => {
  const fake = new FakeDatapath();
  return {
    datapath: fake,
    routerAddress: '10.213.0.1',
    nodeNetnsPath: '/proc/self/ns/net',
    newNetns: async () => {
      const path = `/var/run/netns/tdlfake${n++}`;
      fake.addNetns(path);
      return path;
    },
    removeNetns: async (path) => fake.removeNetns(path),
    newNonNetnsFile: async () => {
      const path = `/tmp/tdlfake-fifo${n++}`;
      fake.addNonNetnsFile(path);
      return path;
    },
    createVethPair: async (hostIfName, netns, podIfName) => fake.createVethPair(hostIfName, netns, podIfName),
    deleteLink: async (name, netns) => fake.deleteLink(name, netns),
    deleteHostRoute: async (prefix) => fake.deleteHostRoute(prefix),
    hostRouteDev: async (prefix) => fake.hostRoutes().find((r) => r.dst === prefix)?.dev,
    linkExists: async (name, netns) => (fake.linkNames(netns) ?? []).includes(name),
    cleanup: async () => undefined,
  };
});
