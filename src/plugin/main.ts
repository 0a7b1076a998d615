#!/usr/bin/env node
// tendril-cni: executed by the container runtime once per CNI call; relays the
// call to the node agent and prints its answer in the netconf's version.
import { pluginMain } from '../cni/skel.js';
import { pluginVersionInfo } from '../cni/version.js';
import { SUPPORTED_CNI_VERSIONS } from '../api/types.js';
import { relayFuncs } from './relay.js';

await pluginMain(relayFuncs(process.env), pluginVersionInfo(SUPPORTED_CNI_VERSIONS), 'tendril-cni: CNI plugin of the tendril node agent');
